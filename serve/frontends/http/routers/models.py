"""Management of models (spec section 2): register, list, describe, scale, set the default version, unregister.

    POST   /models?url=...                          register (parameters from the query or a JSON body)
    GET    /models?limit=&next_page_token=          list the default versions
    GET    /models/{m}[/{v}|/all][?customized=true] describe (always a JSON array)
    PUT    /models/{m}[/{v}]?min_worker=&max_worker=&synchronous=&timeout=   scale
    PUT    /models/{m}/{v}/set-default              set the default version
    DELETE /models/{m}[/{v}]                        unregister

Statuses follow TorchServe: register and scale answer 202 `Processing worker updates...` when they return before
the workers are up, 206 `Workers scaling in progress...` when some are still starting, 200 otherwise. Register and
unregister are 405 unless the model API is enabled (the dataplane checks). Decision: an empty `url` is 400
"Parameter url is required." like a missing one (TorchServe: 404 "empty url").
"""

from __future__ import annotations

from fastapi import APIRouter, Depends
from starlette.requests import Request
from starlette.responses import Response

from serve.frontends.dataplane import MAX_LIST_LIMIT, DataPlane
from serve.frontends.http.deps import DataPlaneDep, require_management_key
from serve.frontends.http.params import bool_param, int_param, request_params, str_param
from serve.frontends.http.responses import pretty_json, status_response

PROCESSING = "Processing worker updates..."
IN_PROGRESS = "Workers scaling in progress..."
ALL_VERSIONS = "all"

router = APIRouter(tags=["models"], dependencies=[Depends(require_management_key)])


def _worker_update(message: str) -> Response:
    status = 202 if message == PROCESSING else 206 if message == IN_PROGRESS else 200
    return status_response(message, status)


@router.post("/models", summary="Register a model archive (url: a file in the model store or an allowed URL)")
async def register(request: Request, dp: DataPlaneDep) -> Response:
    params = await request_params(request)
    message = await dp.register(
        str_param(params, "url") or "",
        model_name=str_param(params, "model_name"),
        handler=str_param(params, "handler"),
        runtime=str_param(params, "runtime"),
        batch_size=int_param(params, "batch_size"),
        max_batch_delay=int_param(params, "max_batch_delay"),
        initial_workers=int_param(params, "initial_workers"),
        synchronous=bool_param(params, "synchronous", True),
        response_timeout=int_param(params, "response_timeout"),
        startup_timeout=int_param(params, "startup_timeout"),
    )
    return _worker_update(message)


@router.get("/models", summary="List the registered models (default versions), paginated")
async def list_models(request: Request, dp: DataPlaneDep) -> Response:
    params = request.query_params
    limit = int_param(params, "limit")
    token = int_param(params, "next_page_token")
    return pretty_json(dp.list_models(MAX_LIST_LIMIT if limit is None else limit, token or 0))


@router.get("/models/{model_name}", summary="Describe the model's default version")
async def describe(model_name: str, request: Request, dp: DataPlaneDep) -> Response:
    customized = bool_param(request.query_params, "customized", False)
    return pretty_json(await dp.describe(model_name, None, customized=customized))


@router.get("/models/{model_name}/{model_version}", summary="Describe one version, or every version with 'all'")
async def describe_version(model_name: str, model_version: str, request: Request,
                           dp: DataPlaneDep) -> Response:  # fmt: skip
    customized = bool_param(request.query_params, "customized", False)
    if model_version == ALL_VERSIONS:
        return pretty_json(await dp.describe(model_name, None, all_versions=True))
    return pretty_json(await dp.describe(model_name, model_version, customized=customized))


@router.put("/models/{model_name}", summary="Scale the workers of the default version (or ?model_version=)")
async def scale(model_name: str, request: Request, dp: DataPlaneDep) -> Response:
    return await _scale(dp, request, model_name, str_param(request.query_params, "model_version"))


@router.put("/models/{model_name}/{model_version}", summary="Scale the workers of one version")
async def scale_version(model_name: str, model_version: str, request: Request,
                        dp: DataPlaneDep) -> Response:  # fmt: skip
    return await _scale(dp, request, model_name, model_version)


async def _scale(dp: DataPlane, request: Request, name: str, version: str | None) -> Response:
    """`number_gpu` is accepted and ignored, as in TorchServe."""
    params = request.query_params
    message = await dp.scale(
        name,
        version or None,
        min_worker=int_param(params, "min_worker"),
        max_worker=int_param(params, "max_worker"),
        synchronous=bool_param(params, "synchronous", False),
        timeout=int_param(params, "timeout"),
    )
    return _worker_update(message)


@router.put("/models/{model_name}/{model_version}/set-default", summary="Make a version the default one")
async def set_default(model_name: str, model_version: str, dp: DataPlaneDep) -> Response:
    return status_response(dp.set_default(model_name, model_version))


@router.delete("/models/{model_name}", summary="Unregister the default version (drains its queue first)")
async def unregister(model_name: str, dp: DataPlaneDep) -> Response:
    return status_response(await dp.unregister(model_name, None))


@router.delete("/models/{model_name}/{model_version}", summary="Unregister one version")
async def unregister_version(model_name: str, model_version: str, dp: DataPlaneDep) -> Response:
    return status_response(await dp.unregister(model_name, model_version))
