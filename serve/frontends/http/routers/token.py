"""`GET /token?type=management|inference` on the management port: rotate a key with the API key (spec section 6)."""

from __future__ import annotations

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from serve.frontends.http.auth import TokenAuth
from serve.frontends.http.responses import pretty_json

router = APIRouter(tags=["token"])


@router.get("/token", summary="Rotate the management or inference key (needs the API key)")
async def rotate_token(request: Request) -> Response:
    auth: TokenAuth = request.app.state.auth
    entry = auth.rotate(request.query_params.get("type"), request.headers.get("authorization"))
    return pretty_json(entry)
