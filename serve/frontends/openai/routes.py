"""The routes of the OpenAI-compatible API and of the OIP generate extension, on the inference port.

    GET  /v1/models, /v1/models/{model_id}                    models.py (shared with KServe v1)
    POST /v1/completions, /v1/chat/completions, /v1/embeddings
    the same under /predictions/{model_name}[/{model_version}]/v1/...   (TorchServe's OpenAI sub-routes)
    POST /v2/models/{model_name}[/versions/{model_version}]/generate[_stream]   generate.py

Every route needs the inference key as `Authorization: Bearer KEY` (what the OpenAI SDK sends as `api_key`), like
/predictions. Errors are OpenAI's shape (errors.py), v2's on the generate routes and KServe's on the shared model
list. Under /predictions the path names the model: a body's `model` may repeat it (the SDK always sends one) but
not name another (400); at the root, `model` is required and names a registered model (404 otherwise).
Decision: `/predictions/{m}/v1/...` means the OpenAI route even for a model with a version called `v1`; a handler's
own sub-route of that name is no longer reachable (the prediction fast path leaves these paths to this router).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel
from starlette.requests import Request
from starlette.responses import Response

from serve.batching import json_values
from serve.errors import ModelNotFound
from serve.frontends.dataplane import DataPlane
from serve.frontends.errors import error_info
from serve.frontends.http.auth import INFERENCE, TokenAuth
from serve.frontends.http.encoding import request_body
from serve.frontends.openai import chat, completions, embeddings, generate, models
from serve.frontends.openai.errors import InvalidField, error_of
from serve.frontends.openai.schemas import ChatCompletionRequest, CompletionRequest, EmbeddingRequest
from serve.frontends.openai.wire import Target

Endpoint = Callable[[Request], Awaitable[Response]]
JSON = "application/json"
PREFIXES = ("", "/predictions/{model_name}", "/predictions/{model_name}/{model_version}")
OPENAI_SUBPATHS = ("v1/models", "v1/completions", "v1/chat/completions", "v1/embeddings")


def json_response(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(json_values.dumps(value), status_code=status, headers=headers, media_type=JSON)


def _dataplane(request: Request) -> DataPlane:
    auth: TokenAuth = request.app.state.auth
    auth.check(INFERENCE, request.headers.get("authorization"))
    dataplane: DataPlane = request.app.state.dataplane
    return dataplane


def openai_errors(endpoint: Endpoint) -> Endpoint:
    async def wrapped(request: Request) -> Response:
        try:
            return await endpoint(request)
        except Exception as exc:  # ServeError, a pydantic ValidationError and bugs alike: OpenAI's body
            status, body = error_of(exc)
            return json_response(body, status, {"WWW-Authenticate": "Bearer"} if status == 401 else None)

    return wrapped


def v2_errors(endpoint: Endpoint) -> Endpoint:
    async def wrapped(request: Request) -> Response:
        try:
            return await endpoint(request)
        except Exception as exc:  # v2's body
            info = error_info(exc)
            headers = {"WWW-Authenticate": "Bearer"} if info.status == 401 else None
            return json_response({"error": info.message}, info.status, headers)

    return wrapped


async def _parsed(request: Request, schema: type[BaseModel]) -> Any:
    try:
        value = json.loads(await request_body(request))
    except json_values.DECODE_ERRORS as e:
        raise InvalidField(f"the body is not JSON ({json_values.decode_error_text(e)})") from None
    if not isinstance(value, dict):
        raise InvalidField(f"the body must be a JSON object, got {type(value).__name__}")
    return schema.model_validate(value)


def _target(request: Request, dataplane: DataPlane, body_model: str | None) -> tuple[Target, str]:
    """The model a call goes to, and the name its answer carries."""
    params = request.path_params
    headers = dict(request.headers.items())
    name = params.get("model_name")
    if name is None:
        if not body_model:
            raise InvalidField("model is required: name a registered model (GET /v1/models lists them)", "model")
        return Target(dataplane, body_model, None, headers), body_model
    if body_model and body_model != name:
        raise InvalidField(f"the path names model {name!r} but the body names {body_model!r}: drop model or make it "
                           f"{name!r}", "model")  # fmt: skip
    return Target(dataplane, name, params.get("model_version"), headers), name


def _answer(result: Response | dict[str, Any]) -> Response:
    return result if isinstance(result, Response) else json_response(result)


async def completions_route(request: Request) -> Response:
    dataplane = _dataplane(request)
    body = await _parsed(request, CompletionRequest)
    target, name = _target(request, dataplane, body.model)
    return _answer(await completions.create(target, body, name))


async def chat_route(request: Request) -> Response:
    dataplane = _dataplane(request)
    body = await _parsed(request, ChatCompletionRequest)
    target, name = _target(request, dataplane, body.model)
    return _answer(await chat.create(target, body, name))


async def embeddings_route(request: Request) -> Response:
    dataplane = _dataplane(request)
    body = await _parsed(request, EmbeddingRequest)
    target, name = _target(request, dataplane, body.model)
    return _answer(await embeddings.create(target, body, name))


async def list_models(request: Request) -> Response:
    return json_response(models.listing(_dataplane(request), request.path_params.get("model_name")))


async def one_model(request: Request) -> Response:
    dataplane = _dataplane(request)
    only = request.path_params.get("model_name")
    model_id = request.path_params["model_id"]
    if only is not None and model_id != only:  # only one model is served under /predictions/{only}: not found here
        raise ModelNotFound(f"model {model_id!r} is not served under /predictions/{only}: GET .../v1/models/{only}, "
                            f"or /v1/models/{model_id}")  # fmt: skip
    return json_response(models.one(dataplane, model_id))


def _generate(stream: bool) -> Endpoint:
    async def endpoint(request: Request) -> Response:
        dataplane = _dataplane(request)
        name, version = request.path_params["model_name"], request.path_params.get("model_version")
        (entry,) = dataplane.registry.describe(name, version)  # ModelNotFound (404) before the body is read
        target = Target(dataplane, name, version, dict(request.headers.items()))
        body = await request_body(request)
        return _answer(await generate.generate(target, body, str(entry.get("modelVersion", "")), stream))

    return endpoint


def _router() -> APIRouter:
    router = APIRouter()
    for prefix in PREFIXES:
        errors = openai_errors if prefix else models_errors
        router.add_route(prefix + "/v1/models", errors(list_models), methods=["GET"], include_in_schema=False)
        router.add_route(prefix + "/v1/models/{model_id}", errors(one_model), methods=["GET"],
                         include_in_schema=False)  # fmt: skip
        for path, endpoint in (("/v1/completions", completions_route), ("/v1/chat/completions", chat_route),
                               ("/v1/embeddings", embeddings_route)):  # fmt: skip
            router.add_route(prefix + path, openai_errors(endpoint), methods=["POST"], include_in_schema=False)
    for prefix in ("/v2/models/{model_name}", "/v2/models/{model_name}/versions/{model_version}"):
        router.add_route(prefix + "/generate", v2_errors(_generate(False)), methods=["POST"], include_in_schema=False)
        router.add_route(prefix + "/generate_stream", v2_errors(_generate(True)), methods=["POST"],
                         include_in_schema=False)  # fmt: skip
    return router


models_errors = v2_errors  # KServe v1's `{"error": message}` on the paths it shares (models.py)
router = _router()


def is_openai_path(path: str) -> bool:
    """Whether a `/predictions/...` path is one of this router's (the prediction fast path lets these through)."""
    rest = path.rstrip("/").split("/", 3)[2:]  # ["m", "v1/..."] or ["m", "ver/v1/..."]
    if len(rest) < 2:
        return False
    tail = rest[1]
    if not tail.startswith("v1/"):
        tail = tail.split("/", 1)[1] if "/" in tail else ""
    return tail in OPENAI_SUBPATHS or tail.startswith("v1/models/")
