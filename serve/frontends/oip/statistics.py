"""Triton's statistics extension, protocol-free: `GET /v2/models[/{m}[/versions/{v}]]/stats` (routers/triton.py)
and the gRPC ModelStatistics rpc answer `{"model_stats": model_statistics(...)}`.

    model_statistics(dataplane)                  # every version of every registered model
    model_statistics(dataplane, "lin")           # every version of lin (Triton: all its loaded versions)
    model_statistics(dataplane, "lin", "1.0")    # one version; ModelNotFound for an unknown model or version

The numbers and how serve's timings map onto Triton's fields: serve/metrics/model_statistics.py. A registered
version that has run no batch answers zeros, as a freshly loaded Triton model does.
"""

from __future__ import annotations

from typing import Any

from serve.frontends.dataplane import DataPlane
from serve.frontends.oip import repository


def model_statistics(dataplane: DataPlane, model: str | None = None, version: str | None = None) -> list[dict]:
    stats = dataplane.metrics.statistics
    if model is None:
        names = repository.model_names(dataplane)
        return [stats.model_stats(n, v) for n in names for v in _versions(dataplane, n, None)]
    return [stats.model_stats(model, v) for v in _versions(dataplane, model, version)]


def _versions(dataplane: DataPlane, model: str, version: str | None) -> list[str]:
    entries: list[dict[str, Any]] = dataplane.registry.describe(model, version, version is None)
    return [str(e["modelVersion"]) for e in entries]
