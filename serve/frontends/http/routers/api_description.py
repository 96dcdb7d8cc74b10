"""TorchServe's API description: `OPTIONS /` and `/api-description` (any method) answer the listener's OpenAPI.

Decision: the document is the OpenAPI that FastAPI generates for the listener (version 3.1, also at
`/openapi.json`, browsable at `/docs`), titled "TorchServe APIs" as TorchServe's 3.0.1 document is; it lists our
routes rather than TorchServe's hand-written ones. `GET /` on the inference port is KServe v1's liveness
(routers/kserve_v1.py); elsewhere 405, as in TorchServe. No token is needed.
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from serve.frontends.http.responses import pretty_json

OTHER_METHODS = ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"]

router = APIRouter(tags=["api description"])


@router.options("/", summary="The OpenAPI description of this listener (TorchServe's OPTIONS /)")
async def options_root(request: Request) -> Response:
    return pretty_json(request.app.openapi())


@router.get("/api-description", summary="The OpenAPI description of this listener")
@router.api_route("/api-description", methods=OTHER_METHODS, include_in_schema=False)
async def api_description(request: Request) -> Response:
    return pretty_json(request.app.openapi())
