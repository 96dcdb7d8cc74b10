"""KServe v1 (TF-Serving style) on the inference port (spec §1.9).

    GET  /                           {"status": "alive"} (KServe's liveness; no key, like /ping)
    GET  /v1/models                  {"models": [names]}
    GET  /v1/models/{m}              {"name": m, "ready": bool}
    POST /v1/models/{m}:predict      {"instances": [...]} (or "inputs") -> {"predictions": [...]}
    POST /v1/models/{m}:explain      same body -> {"explanations": [...]}

Each instance is one request to the model's batcher, with the instance as its JSON body: exactly what
`POST /predictions/{m}` with that JSON gets, so the handler needs nothing v1-specific and the instances of one call
are batched together; the request carries `x-serve-protocol: v1`, so a built-in image or text handler gets the
instance's `data` (serve/batching/envelopes.py). A prediction that is not JSON is returned as text. Errors:
`{"error": "<message>"}` with the status of `frontends.errors`; the first failing instance fails the call; an
unknown model is a 404 even for an empty `instances` list.
Decisions: `:explain` answers only `explanations` (KServe's explainers shape it their own way); routes need the
inference key like `/predictions`; `GET /` needs none (a liveness probe).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from serve.batching import InferenceRequest, json_values
from serve.batching.envelopes import PROTOCOL_HEADER
from serve.errors import InvalidInput, PredictionException
from serve.frontends.dataplane import DataPlane
from serve.frontends.http.routers.oip import dataplane_of, json_response, v2_errors
from serve.frontends.oip import core
from serve.frontends.request_ids import new_request_id


async def alive(request: Request) -> Response:
    return json_response({"status": "alive"})


async def list_models(request: Request) -> Response:
    dataplane = dataplane_of(request)
    names: list[str] = []
    token = 0
    while True:
        page = dataplane.list_models(100, token)
        names += [m["modelName"] for m in page["models"]]
        if "nextPageToken" not in page:
            return json_response({"models": names})
        token = int(page["nextPageToken"])


async def model_ready(request: Request) -> Response:
    name = request.path_params["model_name"]
    return json_response({"name": name, "ready": core.model_ready(dataplane_of(request), name)})


async def predict(request: Request) -> Response:
    return _sized(request, json_response({"predictions": await _run(request, explain=False)}))


async def explain(request: Request) -> Response:
    return _sized(request, json_response({"explanations": await _run(request, explain=True)}))


def _sized(request: Request, answer: Response) -> Response:
    dataplane_of(request, guarded=False).check_response_size(len(answer.body))
    return answer


async def _run(request: Request, explain: bool) -> list[Any]:
    dataplane = dataplane_of(request)
    name = request.path_params["model_name"]
    try:
        body = json.loads(await request.body())
    except json_values.DECODE_ERRORS as e:
        why = json_values.decode_error_text(e)
        raise InvalidInput(f'the body is not JSON ({why}): send {{"instances": [...]}}') from None
    instances = body.get("instances", body.get("inputs")) if isinstance(body, dict) else None
    if not isinstance(instances, list):
        raise InvalidInput('the body must be {"instances": [...]} (or {"inputs": [...]}), one entry per prediction')
    if not instances:  # nothing reaches the model to say it is unknown: ask the registry (ModelNotFound, a 404)
        core.model_ready(dataplane, name)
    headers = dict(request.headers.items())
    return list(await asyncio.gather(*(_one(dataplane, name, i, headers, explain) for i in instances)))


async def _one(dataplane: DataPlane, name: str, instance: Any, headers: dict[str, str], explain: bool) -> Any:
    job = InferenceRequest(
        request_id=new_request_id(),
        inputs={"body": json.dumps(instance).encode()},
        content_types={"body": "application/json"},
        headers={
            **headers,
            "content-type": "application/json",
            "url_path": "",
            "explain": str(explain),
            PROTOCOL_HEADER: "v1",
        },
        decode=True,
    )
    answer = await (dataplane.explain if explain else dataplane.predict)(name, None, job)
    body = answer.body
    if answer.chunks is not None:
        body = b"".join([chunk async for chunk in answer.chunks])
    if answer.status != 200:
        raise PredictionException(core.error_message(body), answer.status)
    try:
        return json.loads(body)
    except json_values.DECODE_ERRORS:
        return body.decode("utf-8", "replace")


router = APIRouter()
router.add_route("/", alive, methods=["GET"], include_in_schema=False)
router.add_route("/v1/models", v2_errors(list_models), methods=["GET"], include_in_schema=False)
router.add_route("/v1/models/{model_name}:predict", v2_errors(predict), methods=["POST"], include_in_schema=False)
router.add_route("/v1/models/{model_name}:explain", v2_errors(explain), methods=["POST"], include_in_schema=False)
router.add_route("/v1/models/{model_name}", v2_errors(model_ready), methods=["GET"], include_in_schema=False)
