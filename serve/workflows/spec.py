"""The workflow specification: TorchServe's YAML of `models:` (global settings, then one block per model with its
`url`) and `dag:` (node -> its successors), read into typed settings and checked before anything is registered.

    models:
        min-workers: 1          # global defaults, overridden per model
        batch-size: 4
        m1:
            url: m1.mar
    dag:
        pre_processing: [m1]    # a name that is not a model is a function of the workflow's handler file

Decisions, following TorchServe's WorkFlow.java where it is silent on errors:
- The defaults are TorchServe's: min-workers 1, max-workers 1, batch-size 1, max-batch-delay 50 ms,
  retry-attempts 1, timeout-ms 10000. A function node always runs with one worker, batch size 1 and no batch
  delay, as TorchServe registers it, and inherits only retry-attempts and timeout-ms.
- Every setting must be an integer (TorchServe casts and fails with a ClassCastException); an unknown global key
  that is not a mapping, a model without `url`, a DAG that is not a mapping of lists, are each an InvalidInput
  naming the key, since the spec is the client's file.
- A DAG node that is neither a model of `models:` nor a function is found only when the handler file is read
  (dag.py checks the function names against it).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from serve.archive import parse_model_config
from serve.errors import ArchiveError, InvalidInput

SETTINGS = {  # spec key -> (field, TorchServe's default, minimum)
    "min-workers": ("min_workers", 1, 0),
    "max-workers": ("max_workers", 1, 0),
    "batch-size": ("batch_size", 1, 1),
    "max-batch-delay": ("max_batch_delay", 50, 0),
    "retry-attempts": ("retry_attempts", 1, 0),
    "timeout-ms": ("timeout_ms", 10000, 1),
}


@dataclass(frozen=True)
class NodeSettings:
    """How one node is registered and run: its workers and batching, and the DAG run's retries and timeout."""

    min_workers: int = 1
    max_workers: int = 1
    batch_size: int = 1
    max_batch_delay: int = 50
    retry_attempts: int = 1
    timeout_ms: int = 10000

    def describe(self) -> dict[str, int]:
        return {"minWorkers": self.min_workers, "maxWorkers": self.max_workers, "batchSize": self.batch_size,
                "maxBatchDelay": self.max_batch_delay}  # fmt: skip


@dataclass(frozen=True)
class ModelNode:
    url: str
    settings: NodeSettings


@dataclass
class WorkflowSpec:
    """The parsed spec: global settings, the model nodes by node name, the DAG as written (node -> successors)."""

    defaults: NodeSettings
    models: dict[str, ModelNode] = field(default_factory=dict)
    dag: dict[str, list[str]] = field(default_factory=dict)

    def function_settings(self) -> NodeSettings:
        """A function node's: one worker, batch 1, no delay (TorchServe's), the global retries and timeout."""
        return NodeSettings(1, 1, 1, 0, self.defaults.retry_attempts, self.defaults.timeout_ms)

    def dag_text(self) -> str:
        """The DAG as TorchServe's describe prints it (a Java map's toString): `{a=[b, c], b=[d]}`."""
        return "{" + ", ".join(f"{node}=[{', '.join(after)}]" for node, after in self.dag.items()) + "}"


def parse_spec(text: str, source: str = "workflow spec") -> WorkflowSpec:
    """The spec in `text`; InvalidInput naming `source` and the offending key when it is not a valid spec."""
    try:
        document = parse_model_config(text, source)
    except ArchiveError as e:
        raise InvalidInput(f"Invalid workflow specification: {e}") from None
    models, dag = document.get("models"), document.get("dag")
    if not isinstance(models, dict):
        raise InvalidInput(f"Invalid workflow specification {source}: it needs a 'models:' mapping")
    if not isinstance(dag, dict) or not dag:
        raise InvalidInput(f"Invalid workflow specification {source}: it needs a 'dag:' mapping of node -> [nodes]")
    defaults = _settings(NodeSettings(), {k: v for k, v in models.items() if k in SETTINGS}, f"{source}: models")
    spec = WorkflowSpec(defaults)
    for name, block in models.items():
        if name in SETTINGS:
            continue
        where = f"{source}: models: {name}"
        if not isinstance(block, dict):
            raise InvalidInput(f"Invalid workflow specification {where}: a model is a mapping with 'url' (global "
                               f"settings are {', '.join(SETTINGS)})")  # fmt: skip
        url = block.get("url")
        if not isinstance(url, str) or not url:
            raise InvalidInput(f"Invalid workflow specification {where}: 'url' (the model archive) is required")
        unknown = sorted(str(k) for k in block if k != "url" and k not in SETTINGS)
        if unknown:
            raise InvalidInput(f"Invalid workflow specification {where}: unknown key(s) {unknown}; a model takes "
                               f"url, {', '.join(SETTINGS)}")  # fmt: skip
        spec.models[str(name)] = ModelNode(url, _settings(defaults, block, where))
    spec.dag = _dag(dag, source)
    return spec


def _settings(base: NodeSettings, block: dict[Any, Any], where: str) -> NodeSettings:
    changes: dict[str, int] = {}
    for key, (attr, _default, minimum) in SETTINGS.items():
        if key not in block:
            continue
        value = block[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise InvalidInput(f"Invalid workflow specification {where}: {key} must be an integer >= {minimum}, "
                               f"got {value!r}")  # fmt: skip
        changes[attr] = value
    settings = replace(base, **changes)
    if settings.max_workers < settings.min_workers:
        raise InvalidInput(f"Invalid workflow specification {where}: max-workers ({settings.max_workers}) is less "
                           f"than min-workers ({settings.min_workers})")  # fmt: skip
    return settings


def _dag(dag: dict[Any, Any], source: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for node, after in dag.items():
        if after is None:
            after = []
        if not isinstance(after, list) or not all(isinstance(a, str) for a in after):
            raise InvalidInput(f"Invalid workflow specification {source}: dag: {node} must list its successor "
                               f"nodes, as '{node}: [next_node]'")  # fmt: skip
        out[str(node)] = [a.strip() for a in after if a and a.strip()]  # TorchServe skips empty names
    return out
