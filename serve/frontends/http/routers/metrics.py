"""`GET /metrics` on the metrics port: the Prometheus text page, filtered with `?name[]=A&name[]=B` as TorchServe.

`metrics_mode` (spec section 3): `prometheus` (our default; TorchServe's `log` default leaves `/metrics` empty,
pain point 15) serves every metric; `legacy` only TorchServe's three `ts_*` counters; `log` an empty page (both
write the metrics to `ts_metrics.log` and `model_metrics.log` instead: serve/metrics/metrics_log.py).
No token is needed, so Prometheus scrapes work with token authorization on.
The page is rendered in a thread: the GPU gauges (serve/metrics/gpu_metrics.py) run nvidia-smi.
"""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from starlette.requests import Request
from starlette.responses import Response

from serve.metrics import LEGACY_NAMES, ServerMetrics

router = APIRouter(tags=["metrics"])


@router.get("/metrics", summary="Prometheus metrics (filter with ?name[]=...)")
async def metrics(request: Request) -> Response:
    server_metrics: ServerMetrics = request.app.state.metrics
    mode = request.app.state.settings.metrics_mode
    names: set[str] | None = set(request.query_params.getlist("name[]")) or None
    if mode == "log":
        names = set()
    elif mode == "legacy":
        names = set(LEGACY_NAMES) & names if names else set(LEGACY_NAMES)
    body, content_type = await asyncio.to_thread(server_metrics.render, names)
    return Response(body, media_type=content_type)
