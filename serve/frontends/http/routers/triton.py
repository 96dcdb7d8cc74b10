"""Triton's REST extensions beyond the Open Inference Protocol's core (spec §1.8), on the inference port beside
routers/oip.py (included before it, so `/v2/models/stats` is not read as a model named "stats"):

    GET  /v2/models/stats                                    {"model_stats": [...]} of every model version
    GET  /v2/models/{m}/stats                                of every version of m
    GET  /v2/models/{m}/versions/{v}/stats                   of one version (frontends/oip/statistics.py)
    POST /v2/repository/models/{m}/load                      register m from the model store, or re-register it
                                                             with a {"parameters": {"config": "<JSON>"}} override
    POST /v2/repository/models/{m}/unload                    unregister every version of m (oip/model_control.py)

Errors are the v2 body `{"error": message}` with the one table's status (routers/oip.py's v2_errors). Statistics take
the inference key, like every v2 route; load and unload change what is served, so they take the management key
(and need --enable-model-api, as the management API's register and unregister do). Load and unload answer
200 with an empty body, as Triton does. Shared memory (system and CUDA) is not served: a 404 from oip.py's
catch-all.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from serve.batching import json_values
from serve.errors import InvalidInput
from serve.frontends.http.auth import MANAGEMENT, TokenAuth
from serve.frontends.http.routers.oip import Endpoint, dataplane_of, json_response, v2_errors
from serve.frontends.oip import model_control, statistics


async def model_stats(request: Request) -> Response:
    dataplane = dataplane_of(request)
    name, version = request.path_params.get("model_name"), request.path_params.get("model_version")
    return json_response({"model_stats": statistics.model_statistics(dataplane, name, version)})


async def load(request: Request) -> Response:
    dataplane, name = _management(request), request.path_params["model_name"]
    await model_control.load_model(dataplane, name, await _parameters(request, "load"))
    return Response(b"", media_type="application/json")


async def unload(request: Request) -> Response:
    dataplane, name = _management(request), request.path_params["model_name"]
    await _parameters(request, "unload")  # unload_dependents: nothing depends on a model in serve
    await model_control.unload_model(dataplane, name)
    return Response(b"", media_type="application/json")


def _management(request: Request) -> Any:
    auth: TokenAuth = request.app.state.auth
    auth.check(MANAGEMENT, request.headers.get("authorization"))
    return dataplane_of(request, guarded=False)


async def _parameters(request: Request, what: str) -> dict[str, Any]:
    """The body's `parameters` object (Triton's load/unload body); an empty body has none."""
    body = await request.body()
    try:
        value = json.loads(body) if body.strip() else {}
    except json_values.DECODE_ERRORS as e:
        raise InvalidInput(f"the {what} body is not JSON ({json_values.decode_error_text(e)}): send "
                           '{"parameters": {...}} or nothing') from None  # fmt: skip
    parameters = value.get("parameters", {}) if isinstance(value, dict) else None
    if not isinstance(parameters, dict):
        raise InvalidInput(f'the {what} body must be {{"parameters": {{...}}}} or empty, got {value!r}')
    return parameters


ROUTES: list[tuple[str, Endpoint, str]] = [
    ("/v2/models/stats", model_stats, "GET"),
    ("/v2/models/{model_name}/stats", model_stats, "GET"),
    ("/v2/models/{model_name}/versions/{model_version}/stats", model_stats, "GET"),
    ("/v2/repository/models/{model_name}/load", load, "POST"),
    ("/v2/repository/models/{model_name}/unload", unload, "POST"),
]

router = APIRouter()
for _path, _endpoint, _method in ROUTES:
    router.add_route(_path, v2_errors(_endpoint), methods=[_method], include_in_schema=False)
