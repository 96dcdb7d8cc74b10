"""TorchServe's workflow routes: management on the management listener, `/wfpredict` on the inference listener.

    POST   /workflows?url=<name.war>&workflow_name=&response_timeout=&startup_timeout=   register (query or JSON)
    GET    /workflows?limit=&next_page_token=                                          list
    GET    /workflows/{name}                                                           describe (a JSON array)
    DELETE /workflows/{name}                                                           unregister
    POST   /wfpredict/{name}                                                           run the DAG on the body

Messages and shapes are TorchServe's (docs/workflow_management_api.md). The work is serve/workflows' manager,
reached as `dataplane.workflows` (the server sets it; an app built without one answers 404 on these routes).
Decisions: registering and unregistering a workflow need the model API enabled, as models do (a workflow
registers models and brings python code; TorchServe 0.12 does not check, then disabled workflow registration for
good); `s3_sse_kms` is accepted and ignored; a list `limit` outside 1..100 or a negative `next_page_token` is a 400, as
for models (TorchServe clamps them). A request body reaches the start node as a prediction's does
(parsing.py); POST and PUT (`curl -T`) predict. No gRPC: TorchServe has no workflow rpc.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends
from starlette.requests import Request
from starlette.responses import Response

from serve.errors import ModelApiDisabled, WorkflowNotFound
from serve.frontends.dataplane import MAX_LIST_LIMIT, MODEL_API_DISABLED, DataPlane
from serve.frontends.http.auth import INFERENCE, TokenAuth
from serve.frontends.http.deps import DataPlaneDep, require_management_key
from serve.frontends.http.encoding import compress
from serve.frontends.http.params import int_param, request_params, str_param
from serve.frontends.http.parsing import inference_request
from serve.frontends.http.responses import inference_response, pretty_json, status_response
from serve.workflows import WorkflowManager

router = APIRouter(tags=["workflows"], dependencies=[Depends(require_management_key)])
inference_router = APIRouter(tags=["workflows"])


def _manager(dp: DataPlane) -> WorkflowManager:
    manager: WorkflowManager | None = getattr(dp, "workflows", None)
    if manager is None:
        raise WorkflowNotFound("Workflows are not served by this server")
    return manager


def _require_model_api(dp: DataPlane, what: str) -> None:
    if not dp.settings.enable_model_api:
        raise ModelApiDisabled(f"{MODEL_API_DISABLED} Model API disabled: cannot {what}. Start the server with "
                               "--enable-model-api (or enable_model_api=true in config.properties) to allow "
                               "it.")  # fmt: skip


@router.post("/workflows", summary="Register a workflow archive (.war in the workflow store, or an allowed URL)")
async def register(request: Request, dp: DataPlaneDep) -> Response:
    _require_model_api(dp, "register a workflow")
    params = await request_params(request)
    message = await _manager(dp).register(
        str_param(params, "url"),
        workflow_name=str_param(params, "workflow_name"),
        response_timeout=int_param(params, "response_timeout"),
        startup_timeout=int_param(params, "startup_timeout"),
    )
    return status_response(message)


@router.get("/workflows", summary="List the registered workflows, paginated")
async def list_workflows(request: Request, dp: DataPlaneDep) -> Response:
    limit = int_param(request.query_params, "limit")
    token = int_param(request.query_params, "next_page_token")
    return pretty_json(_manager(dp).list_workflows(MAX_LIST_LIMIT if limit is None else limit, token or 0))


@router.get("/workflows/{workflow_name}", summary="Describe a workflow: its url, global settings and DAG")
async def describe(workflow_name: str, dp: DataPlaneDep) -> Response:
    return pretty_json(_manager(dp).describe(workflow_name))


@router.delete("/workflows/{workflow_name}", summary="Unregister a workflow and the models of its nodes")
async def unregister(workflow_name: str, dp: DataPlaneDep) -> Response:
    _require_model_api(dp, "unregister a workflow")
    return status_response(await _manager(dp).unregister(workflow_name))


async def wfpredict(request: Request) -> Response:
    state = request.app.state
    auth: TokenAuth = state.auth
    auth.check(INFERENCE, request.headers.get("authorization"))
    job = await inference_request(request, "", False, state.settings.decode_input_request)
    answer = await _manager(state.dataplane).predict(request.path_params["workflow_name"], job)
    return compress(inference_response(answer), request.headers.get("accept-encoding"))


inference_router.add_route("/wfpredict/{workflow_name}", wfpredict, methods=["POST", "PUT"],
                           include_in_schema=False)  # fmt: skip

OPENAPI_PATHS = {  # the plain route's entry (openapi.py adds its statuses and body)
    "/wfpredict/{workflow_name}": {
        method: {
            "tags": ["workflows"],
            "summary": "Run the workflow's DAG on the body" + (" (PUT, as curl -T sends)" if method == "put" else ""),
            "operationId": f"workflow_predict_{method}",
            "parameters": [{"name": "workflow_name", "in": "path", "required": True, "schema": {"type": "string"}}],
            "responses": {"200": {"description": "The leaf node's answer; several leaves: {leaf: answer}"}},
        }
        for method in ("post", "put")
    }
}
