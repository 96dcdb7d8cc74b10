"""Triton's model repository extension (load, unload, the index of the repository) mapped onto serve's registry and
model store, protocol-free: REST `POST /v2/repository/...` (routers/triton.py) and the gRPC RepositoryModelLoad /
RepositoryModelUnload / RepositoryIndex rpcs call these.

    await load_model(dataplane, "simple")                                  # register simple.mar from the store
    await load_model(dataplane, "simple", {"config": '{"max_batch_size": 16}'})   # re-register with batch size 16
    await unload_model(dataplane, "simple")                                # unregister every version
    store_models(dataplane)                                                # archive names in the model store

Decisions:
- Triton's repository is serve's model store: a model is a `.mar`, `.tar.gz` or `.tgz` archive, or a directory
  holding `MAR-INF/MANIFEST.json`, named by its file name without the suffix. Loading a name that is not
  registered registers that archive (as the management API's `POST /models?url=<file>&model_name=<name>` does, with
  at least one worker, waiting until it is ready: Triton's load returns once the model is ready). Loading a
  registered model with no `config` leaves it as it is (scaled to one worker when it has none); with a `config`
  (Triton's JSON ModelConfig override) it is unregistered and registered again with the settings the override
  maps onto: `max_batch_size` -> batch_size, `dynamic_batching.max_queue_delay_microseconds` -> max_batch_delay
  (rounded up to milliseconds). Other override fields and `file:` parameters (Triton's model files sent inline)
  are refused with a 400 that names them: serve's archives carry their own files (over gRPC, INTERNAL, the code
  Triton answers and its model control example checks, its own TODO notwithstanding).
- Unloading unregisters every version of the model (Triton unloads the model, not a version);
  `unload_dependents` has nothing to act on (serve has no ensembles) and is accepted.
- Failures keep Triton's wording at the front ("failed to load 'm': ...", "failed to unload 'm': ..."), which its
  clients and examples match on, then say what was wrong. Both need the management API switched on
  (`--enable-model-api`), as registering and unregistering do; over REST they take the management key, not the
  inference one (the routes are on the inference port, where tritonclient sends them).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from serve.errors import InvalidInput, ModelApiDisabled, ModelNotFound, ServeError
from serve.frontends.dataplane import MODEL_API_DISABLED, DataPlane

SUFFIXES = (".mar", ".tar.gz", ".tgz")
CONFIG_KEYS = {"max_batch_size", "dynamic_batching"}


def store_models(dataplane: DataPlane) -> dict[str, str]:
    """Model name -> file name of every model archive in the model store (empty without a store)."""
    store = dataplane.settings.model_store
    if store is None or not store.is_dir():
        return {}
    found: dict[str, str] = {}
    for path in sorted(store.iterdir()):
        name = _model_name(path)
        if name is not None:
            found.setdefault(name, path.name)
    return found


def _model_name(path: Path) -> str | None:
    if path.is_dir():
        return path.name if (path / "MAR-INF" / "MANIFEST.json").is_file() else None
    for suffix in SUFFIXES:
        if path.name.endswith(suffix) and len(path.name) > len(suffix):
            return path.name[: -len(suffix)]
    return None


async def load_model(dataplane: DataPlane, name: str, parameters: dict[str, Any] | None = None) -> None:
    """Triton's load (see the module docstring); raises InvalidInput, ModelNotFound or the registry's errors."""
    _require_model_api(dataplane, f"load '{name}'")
    parameters = dict(parameters or {})
    settings = _override(name, parameters.pop("config", None))
    files = sorted(k for k in parameters if k.startswith("file:"))
    if files:
        raise InvalidInput(files_refused(name, files))
    registered = _registered(dataplane, name)
    if registered and not settings:
        if not any(e.get("workers") for e in dataplane.registry.describe(name, None, True)):
            await dataplane.scale(name, None, 1, synchronous=True)
        return
    url = _url(dataplane, name, registered)
    if registered:
        await unload_model(dataplane, name)
    try:
        await dataplane.register(url, model_name=name, synchronous=True, batch_size=settings.get("batch_size"),
                                 max_batch_delay=settings.get("max_batch_delay"))  # fmt: skip
        if not dataplane.registry.describe(name, None)[0].get("workers"):  # 0 initial workers: Triton's is ready
            await dataplane.scale(name, None, 1, synchronous=True)
    except ServeError as e:  # the same error (its status, a code it carries) with Triton's words in front
        e.args = (f"failed to load '{name}': {e}", *e.args[1:])
        raise


def files_refused(name: str, files: list[str]) -> str:
    shown = ", ".join(f[:40] + ("..." if len(f) > 40 else "") for f in files[:3])
    return (
        f"failed to load '{name}': failed to poll from model repository: model files sent with the load "
        f"({shown}) are not supported: put the model's archive in the model store and load it by name"
    )


async def unload_model(dataplane: DataPlane, name: str) -> None:
    """Unregister every version of `name`; ModelNotFound when it is not loaded."""
    _require_model_api(dataplane, f"unload '{name}'")
    if not _registered(dataplane, name):
        raise ModelNotFound(f"failed to unload '{name}': no model of that name is loaded")
    for entry in dataplane.registry.describe(name, None, True):
        await dataplane.unregister(name, str(entry["modelVersion"]))


def _require_model_api(dataplane: DataPlane, what: str) -> None:
    if not dataplane.settings.enable_model_api:
        raise ModelApiDisabled(
            f"{MODEL_API_DISABLED} Model API disabled: cannot {what}. Start the server with "
            "--enable-model-api (or enable_model_api=true in config.properties) to allow it."
        )


def _registered(dataplane: DataPlane, name: str) -> bool:
    try:
        dataplane.registry.describe(name, None)
    except ModelNotFound:
        return False
    return True


def _url(dataplane: DataPlane, name: str, registered: bool) -> str:
    """The archive to register: the registered default version's url when reloading, else the store's file."""
    if registered:
        return str(dataplane.registry.describe(name, None)[0]["modelUrl"])
    found = store_models(dataplane).get(name)
    if found is None:
        store = dataplane.settings.model_store
        where = f"in the model store {store}" if store is not None else "(no model store: start with --model-store)"
        raise ModelNotFound(f"failed to load '{name}': no model archive {name}.mar, {name}.tar.gz or model "
                            f"directory {name} {where}")  # fmt: skip
    return found


def _override(name: str, config: Any) -> dict[str, int]:
    """register()'s keyword arguments from Triton's JSON ModelConfig override (see the module docstring)."""
    if config is None:
        return {}
    try:
        value = json.loads(config) if isinstance(config, (str, bytes)) else config
    except ValueError as e:
        raise InvalidInput(f"failed to load '{name}': the config parameter is not JSON ({e}): send a ModelConfig "
                           'object such as {"max_batch_size": 16}') from None  # fmt: skip
    if not isinstance(value, dict):
        raise InvalidInput(f"failed to load '{name}': the config parameter must be a JSON object, got {value!r}")
    unknown = sorted(set(value) - CONFIG_KEYS - {"name"})
    if unknown:
        raise InvalidInput(f"failed to load '{name}': serve maps only {sorted(CONFIG_KEYS)} of a config override "
                           f"onto its model settings, not {unknown}")  # fmt: skip
    if value.get("name", name) != name:
        raise InvalidInput(f"failed to load '{name}': the config names another model, {value['name']!r}")
    out: dict[str, int] = {}
    if "max_batch_size" in value:
        out["batch_size"] = max(_integer(name, "max_batch_size", value["max_batch_size"]), 1)
    batching = value.get("dynamic_batching")
    if batching is not None:
        if not isinstance(batching, dict):
            raise InvalidInput(f"failed to load '{name}': dynamic_batching must be an object, got {batching!r}")
        delay = batching.get("max_queue_delay_microseconds")
        if delay is not None:
            out["max_batch_delay"] = math.ceil(_integer(name, "max_queue_delay_microseconds", delay) / 1000)
    return out


def _integer(name: str, key: str, value: Any) -> int:
    """A ModelConfig integer: protobuf's JSON mapping writes 64-bit integers as strings, so both are accepted."""
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise InvalidInput(f"failed to load '{name}': config {key} must be an integer, got {value!r}") from None
    if number < 0 or isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
        raise InvalidInput(f"failed to load '{name}': config {key} must be an integer >= 0, got {value!r}")
    return number
