"""`/ping` (any method): 200 `{"status": "Healthy"}`, or 500 `{"status": "Unhealthy"}` when a model has no live worker.
`GET /health`: the same health as vLLM's OpenAI server answers it (200 with an empty body, else 503), which
OpenAI-compatible load generators (guidellm) and vLLM's deployment manifests probe.

Decision: healthy means every model's workers are up (the registry's `health()`), not TorchServe's "unhealthy only
after 5 minutes of failed restarts", so a load balancer stops sending traffic to a server whose model is down
(pain point 4). No token is needed, so Kubernetes probes work with token authorization on (pain point 2).
"""

from __future__ import annotations

from fastapi import APIRouter
from starlette.responses import Response

from serve.frontends.http.deps import DataPlaneDep
from serve.frontends.http.responses import pretty_json

OTHER_METHODS = ["POST", "PUT", "DELETE", "PATCH"]  # TorchServe answers /ping for any method (GET adds HEAD)

router = APIRouter(tags=["health"])


@router.get("/ping", summary="Server health: Healthy when every model has a live worker")
@router.api_route("/ping", methods=OTHER_METHODS, include_in_schema=False)
async def ping(dp: DataPlaneDep) -> Response:
    healthy = dp.ping()
    return pretty_json({"status": "Healthy" if healthy else "Unhealthy"}, 200 if healthy else 500)


@router.get("/health", summary="Server health as vLLM's OpenAI server answers it: 200 empty, or 503")
async def health(dp: DataPlaneDep) -> Response:
    return Response(status_code=200 if dp.ping() else 503)
