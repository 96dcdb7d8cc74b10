"""Triton's model configuration and repository index, protocol-free: REST `/config`, `/v2/repository/index` and the
gRPC ModelConfig / RepositoryIndex rpcs answer these dicts (gRPC parses them into its messages).

    model_config(dataplane, "lin")   # {"name", "platform", "backend", "max_batch_size", "input", "output",
                                     #  "dynamic_batching": {"max_queue_delay_microseconds"}}
    repository_index(dataplane)      # [{"name", "version", "state", "reason"}]

Decisions:
- The config is derived, never stored: the tensors from the v2 metadata (the model-config's `handler: {inputs,
  outputs}`, core.py), `max_batch_size` from `batchSize` when every metadata shape starts with the -1 batch
  dimension (which is then left out of `dims`, as perf_analyzer expects), else 0; `dynamic_batching` only when
  the batch size is over 1, its delay `maxBatchDelay` (ms) in microseconds; a stateful model (`sequenceBatching`)
  has `sequence_batching` with `max_sequence_idle_microseconds` instead, as Triton's sequence models do. Data
  types are Triton's enum names (`TYPE_FP32`; BYTES is `TYPE_STRING`), dims JSON numbers (Triton's HTTP endpoint
  writes numbers too). An input's `format` and an output's `label_filename` are the model-config's
  (classification.py), when it declares them.
- The index lists every version of every model, state `READY` when a worker of that version is READY, else
  `UNAVAILABLE` with the reason; then every archive in the model store that is not registered (model_control.py
  names them), `UNAVAILABLE` with the reason `unloaded`, as Triton lists its repository's unloaded models;
  `ready_only` keeps the READY ones (Triton's `{"ready": true}`).
"""

from __future__ import annotations

from typing import Any

from serve.frontends.dataplane import DataPlane
from serve.frontends.oip import classification, core, model_control


def model_config(dataplane: DataPlane, model: str, version: str | None = None) -> dict[str, Any]:
    """Triton's ModelConfig (JSON field names) of a model version; ModelNotFound for an unknown one."""
    meta = core.model_metadata(dataplane, model, version)
    (entry,) = dataplane.registry.describe(model, version)
    batch = int(entry.get("batchSize") or 1)
    tensors = [*meta["inputs"], *meta["outputs"]]
    batched = all(t["shape"] and t["shape"][0] == -1 for t in tensors)
    max_batch_size = batch if batched else 0
    skip = 1 if max_batch_size > 0 else 0
    handler = classification.handler_config(dataplane, model, version)
    formats = classification.declared(handler, "inputs", "format")
    labels = classification.declared(handler, "outputs", "label_filename")
    config: dict[str, Any] = {
        "name": meta["name"],
        "platform": meta["platform"],
        "backend": "python",
        "max_batch_size": max_batch_size,
        "input": [_tensor(t, skip, format=formats.get(t["name"])) for t in meta["inputs"]],
        "output": [_tensor(t, skip, label_filename=labels.get(t["name"])) for t in meta["outputs"]],
    }
    if entry.get("stateful"):  # Triton's sequence batcher instead of its dynamic batcher (oip/sequence.py)
        config["sequence_batching"] = {"max_sequence_idle_microseconds": int(entry["sequenceMaxIdleMSec"]) * 1000}
    elif batch > 1:
        delay_us = int(entry.get("maxBatchDelay") or 0) * 1000
        config["dynamic_batching"] = {"max_queue_delay_microseconds": delay_us}
    return config


def data_type(datatype: str) -> str:
    """The ModelConfig enum name of a v2 datatype: `TYPE_FP32`, and `TYPE_STRING` for BYTES."""
    return "TYPE_STRING" if datatype == "BYTES" else f"TYPE_{datatype}"


def _tensor(spec: dict[str, Any], skip: int, **declared: str | None) -> dict[str, Any]:
    """One ModelInput/ModelOutput; `declared` adds the model-config's `format` / `label_filename` when set."""
    tensor = {"name": spec["name"], "data_type": data_type(spec["datatype"]), "dims": list(spec["shape"][skip:])}
    return tensor | {k: v for k, v in declared.items() if v is not None}


def repository_index(dataplane: DataPlane, ready_only: bool = False) -> list[dict[str, str]]:
    """Every registered model version as `{name, version, state, reason}` (see the module docstring)."""
    index = []
    names = model_names(dataplane)
    for name in names:
        for entry in dataplane.registry.describe(name, None, True):
            workers = entry.get("workers", [])
            ready = any(w.get("status") == "READY" for w in workers)
            if ready_only and not ready:
                continue
            reason = "" if ready else f"no READY worker ({len(workers)} worker(s)): see describe on the management API"
            index.append({"name": name, "version": str(entry.get("modelVersion", "")),
                          "state": "READY" if ready else "UNAVAILABLE", "reason": reason})  # fmt: skip
    if not ready_only:
        registered = set(names) | {str(m.get("modelUrl", "")) for m in _registered_urls(dataplane, names)}
        for name, file in model_control.store_models(dataplane).items():
            if name not in registered and file not in registered:
                index.append({"name": name, "version": "", "state": "UNAVAILABLE", "reason": "unloaded"})
    return index


def _registered_urls(dataplane: DataPlane, names: list[str]) -> list[dict[str, Any]]:
    return [e for name in names for e in dataplane.registry.describe(name, None, True)]


def model_names(dataplane: DataPlane) -> list[str]:
    """Every registered model's name, through the paged list."""
    names, token = [], 0
    while True:
        page = dataplane.list_models(100, token)
        names += [m["modelName"] for m in page.get("models", [])]
        next_token = page.get("nextPageToken")
        if not next_token or int(next_token) <= token:
            return names
        token = int(next_token)
