"""Open Inference Protocol (KServe v2) over REST on the inference port (spec §1.1): health, metadata, infer.

    GET  /v2                                   server metadata {name, version, extensions}
    GET  /v2/health/live, /v2/health/ready     {"live": true} / {"ready": true}; not ready: 503
    GET  /v2/models/{m}[/versions/{v}]         model metadata (frontends/oip/core.py says where it comes from)
    GET  /v2/models/{m}[/versions/{v}]/ready   {"name": m, "ready": true}; not ready: 503
    GET  /v2/models/{m}[/versions/{v}]/config  Triton's model configuration JSON (frontends/oip/repository.py)
    POST /v2/models/{m}[/versions/{v}]/infer   JSON or the binary tensor extension (frontends/oip/rest.py)
    POST /v2/models/{m}[/versions/{v}]/explain the same body, through the handler's explanation path
    POST /v2/repository/index                  [{name, version, state, reason}]; body {"ready": true} optional

Every failure is `{"error": "<message>"}` with the status of `frontends.errors` (400 bad input, 401 no key, 404
unknown model, 503 not ready or queue full, 500 otherwise), as spec §1.7 asks; not TorchServe's error body.
Decisions: `/v2/health/*` are open like `/ping` (Kubernetes probes carry no key); every other v2 route needs the
inference key, like `/predictions`. The v2 body goes through the same `max_request_size` check (its 413 keeps
TorchServe's body); infer and explain read gzip/deflate bodies and compress answers on `Accept-Encoding`
(http/encoding.py). Any other `/v2/...` path is a 404 in the v2 body; a v2 path with another method a 405; both
echo the path as serve.archive.shown does a name (escaped, at most 64 characters).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from serve.archive import shown
from serve.batching import json_values
from serve.errors import InvalidInput, ModelNotFound, ModelNotReady
from serve.frontends.dataplane import DataPlane
from serve.frontends.errors import error_info
from serve.frontends.http.auth import INFERENCE, TokenAuth
from serve.frontends.http.encoding import compress, request_body
from serve.frontends.http.openapi import allowed_methods
from serve.frontends.oip import core, repository, rest, tensors

JSON = "application/json"
Endpoint = Callable[[Request], Awaitable[Response]]


def json_response(value: Any, status: int = 200, headers: dict[str, str] | None = None) -> Response:
    return Response(json_values.dumps(value), status_code=status, headers=headers, media_type=JSON)


def v2_errors(endpoint: Endpoint) -> Endpoint:
    """Answer any exception as `{"error": message}` with its status from the one table."""

    async def wrapped(request: Request) -> Response:
        try:
            return await endpoint(request)
        except Exception as exc:  # ServeError and bugs alike: the v2 error body
            info = error_info(exc)
            headers = {"WWW-Authenticate": "Bearer"} if info.status == 401 else None
            return json_response({"error": info.message}, info.status, headers)

    return wrapped


def dataplane_of(request: Request, guarded: bool = True) -> DataPlane:
    state = request.app.state
    if guarded:
        auth: TokenAuth = state.auth
        auth.check(INFERENCE, request.headers.get("authorization"))
    dataplane: DataPlane = state.dataplane
    return dataplane


def _model(request: Request) -> tuple[str, str | None]:
    return request.path_params["model_name"], request.path_params.get("model_version")


async def server_metadata(request: Request) -> Response:
    dataplane_of(request)
    return json_response(core.server_metadata())


async def live(request: Request) -> Response:
    return json_response({"live": core.server_live(dataplane_of(request, guarded=False))})


async def ready(request: Request) -> Response:
    if not core.server_ready(dataplane_of(request, guarded=False)):
        raise ModelNotReady("not every model has a worker: see GET /ping and the management API's describe")
    return json_response({"ready": True})


async def model_metadata(request: Request) -> Response:
    return json_response(core.model_metadata(dataplane_of(request), *_model(request)))


async def model_ready(request: Request) -> Response:
    name, version = _model(request)
    if not core.model_ready(dataplane_of(request), name, version):
        raise ModelNotReady(f"model {name!r} has no READY worker yet: retry, or scale its workers")
    return json_response({"name": name, "ready": True})


async def model_config(request: Request) -> Response:
    return json_response(repository.model_config(dataplane_of(request), *_model(request)))


async def repository_index(request: Request) -> Response:
    dataplane = dataplane_of(request)
    body = await request.body()
    try:
        value = json.loads(body) if body.strip() else {}
    except json_values.DECODE_ERRORS as e:
        raise InvalidInput(f'the repository index body is not JSON ({json_values.decode_error_text(e)}): send '
                           '{"ready": true}, {} or nothing') from None  # fmt: skip
    ready = value.get("ready", False) if isinstance(value, dict) else None
    if not isinstance(ready, bool):
        raise InvalidInput(f'the repository index body must be {{"ready": true|false}} or empty, got {value!r}')
    return json_response(repository.repository_index(dataplane, ready))


async def infer(request: Request) -> Response:
    return await _infer(request, explain=False)


async def explain(request: Request) -> Response:
    return await _infer(request, explain=True)


async def _infer(request: Request, explain: bool) -> Response:
    dataplane = dataplane_of(request)
    name, version = _model(request)
    v2 = rest.parse_request(await request_body(request), request.headers.get(tensors.HEADER_LENGTH))
    response = await core.infer(dataplane, name, version, v2, dict(request.headers.items()), explain)
    body, header_length = rest.encode_response(response, v2)
    dataplane.check_response_size(len(body))
    if header_length is None:
        answer = Response(body, media_type=JSON)
    else:
        answer = Response(body, media_type="application/octet-stream",
                          headers={"Inference-Header-Content-Length": str(header_length)})  # fmt: skip
    return compress(answer, request.headers.get("accept-encoding"))


ROUTES: list[tuple[str, Endpoint, str]] = [
    ("/v2", server_metadata, "GET"),
    ("/v2/health/live", live, "GET"),
    ("/v2/health/ready", ready, "GET"),
    ("/v2/repository/index", repository_index, "POST"),
]
for _prefix in ("/v2/models/{model_name}", "/v2/models/{model_name}/versions/{model_version}"):
    ROUTES += [(_prefix, model_metadata, "GET"), (_prefix + "/ready", model_ready, "GET"),
               (_prefix + "/config", model_config, "GET"), (_prefix + "/infer", infer, "POST"),
               (_prefix + "/explain", explain, "POST")]  # fmt: skip


async def unknown(request: Request) -> Response:
    """Any other `/v2/...` path: 404 in the v2 error body, which tritonclient reads (Triton's shared memory, trace and
    logging are not served; /stats and repository load/unload are routers/triton.py's); a v2 path with another
    method: 405."""
    allowed = allowed_methods(request, catch_all=False)
    if allowed:  # a v2 route with another method: 405 with Allow, as for any other path
        message = f"method {request.method} is not allowed on {shown(request.url.path)}: use {', '.join(allowed)}"
        return json_response({"error": message}, 405, {"Allow": ", ".join(allowed)})
    routes = ", ".join(f"{method} {path}" for path, _, method in ROUTES)
    raise ModelNotFound(f"no v2 route for {request.method} {shown(request.url.path)}: this server answers {routes}")


router = APIRouter()
for _path, _endpoint, _method in ROUTES:
    router.add_route(_path, v2_errors(_endpoint), methods=[_method], include_in_schema=False)
router.add_route("/v2/{rest:path}", v2_errors(unknown), methods=["GET", "POST", "PUT", "DELETE"],
                 include_in_schema=False)  # fmt: skip
