"""Inference: `POST /predictions/{model}[/{version}[/{url_path...}]]` and `POST /explanations/{model}[/{version}]`.

The body becomes the handler's input dict (parsing.py); the answer carries the handler's status, headers and
content type, streamed chunk by chunk when the handler yields. Extra path segments after the version reach the
handler as the `url_path` header (TorchServe's OpenAI-style sub-routes).

These are plain Starlette routes, not FastAPI path operations: FastAPI's dependency solving and parameter
validation cost several times the rest of the request on this, the hot path. Their OpenAPI entries are written
out in `OPENAPI_PATHS` (as TorchServe writes its API description by hand).

Decision: POST and PUT predict (TorchServe runs inference for any method but OPTIONS; its docs send files with
`curl -T`, a PUT); other methods are 405. A gzip or deflate body is inflated, and the answer compressed when the
client accepts it (encoding.py).
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from serve.frontends.dataplane import DataPlane
from serve.frontends.http.auth import INFERENCE, TokenAuth
from serve.frontends.http.encoding import compress
from serve.frontends.http.parsing import inference_request
from serve.frontends.http.responses import inference_response


async def _infer(request: Request, explain: bool) -> Response:
    state = request.app.state
    auth: TokenAuth = state.auth
    auth.check(INFERENCE, request.headers.get("authorization"))
    params = request.path_params
    job = await inference_request(request, params.get("url_path", ""), explain, state.settings.decode_input_request)
    dataplane: DataPlane = state.dataplane
    infer = dataplane.explain if explain else dataplane.predict
    response = inference_response(await infer(params["model_name"], params.get("model_version"), job))
    return compress(response, request.headers.get("accept-encoding"))


async def predict(request: Request) -> Response:
    return await _infer(request, explain=False)


async def explain(request: Request) -> Response:
    return await _infer(request, explain=True)


METHODS = ["POST", "PUT"]
PATHS = {
    "/predictions/{model_name}": (predict, "Predict with the model's default version"),
    "/predictions/{model_name}/{model_version}": (predict, "Predict with one version of the model"),
    "/predictions/{model_name}/{model_version}/{url_path:path}": (predict, "Predict on a handler sub-route"),
    "/explanations/{model_name}": (explain, "Explain a prediction of the model's default version"),
    "/explanations/{model_name}/{model_version}": (explain, "Explain a prediction of one version of the model"),
}


def _router() -> APIRouter:
    router = APIRouter()
    for path, (endpoint, _) in PATHS.items():
        router.add_route(path, endpoint, methods=METHODS, include_in_schema=False)
    return router


router = _router()


def _operation(path: str, summary: str) -> dict[str, Any]:
    names = [part.strip("{}").split(":")[0] for part in path.split("/") if part.startswith("{")]
    return {
        "post": {
            "tags": ["inference"],
            "summary": summary,
            "operationId": summary.lower().replace(" ", "_").replace("'", ""),
            "parameters": [{"name": n, "in": "path", "required": True, "schema": {"type": "string"}} for n in names],
            "requestBody": {
                "description": "A raw body (its Content-Type is passed on; JSON and text are decoded), "
                "multipart/form-data or url-encoded form fields (one input per field)",
                "content": {"*/*": {"schema": {}}},
            },
            "responses": {
                "200": {"description": "The handler's answer, with the status, headers and content type it set"},
                "401": {"description": "Missing or wrong inference key"},
                "404": {"description": "Unknown model or version"},
                "413": {"description": "Body larger than max_request_size"},
                "503": {"description": "Queue full or no worker"},
            },
        }
    }


def _operations(path: str, summary: str) -> dict[str, Any]:
    post = _operation(path, summary)["post"]
    put = {**post, "summary": summary + " (PUT, as curl -T sends)", "operationId": post["operationId"] + "_put"}
    return {"post": post, "put": put}


OPENAPI_PATHS = {path.replace(":path", ""): _operations(path, summary) for path, (_, summary) in PATHS.items()}
