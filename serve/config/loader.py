"""`load_settings`: defaults < config.properties < environment (`TS_*`) < command line, checked into `Settings`.

The config file is the first of: env `TS_CONFIG_FILE`, `cli["ts_config"]` (`--ts-config`), `./config.properties`
(TorchServe's order; a named file that does not exist is an error, a missing `./config.properties` is not).
Values may use `$$NAME$$` (see properties.py). `TS_*` variables count only when `enable_envvars_config` is true
in the file or on the command line (environment.py). `LOG_LOCATION` is always read. Two switches keep
TorchServe's order env > CLI > file: `TS_DISABLE_TOKEN_AUTHORIZATION` over `--disable-token-auth` and
`TS_ENABLE_MODEL_API` over `--enable-model-api` (`ENV_OVER_CLI`; TorchServe's token-authorization docs and
tests): an operator's environment that turns token authorization back on is not undone by a flag.

Snapshots, a deliberate difference: TorchServe uses its latest snapshot *instead of* `./config.properties` (never
when `--ts-config` is given), because its snapshots repeat every property. Ours hold only the models, so the
config file is always read as above and the latest snapshot in `{log_location}/config` supplies
`model_snapshot` (unless `--ncs`): a restart keeps the registered models whichever way the server was started.

`number_of_gpu` defaults to the GPUs CUDA will show (gpus.py asks nvidia-smi; 0 without it); a configured value
above that is capped with a warning, as TorchServe caps it.

Unknown keys are logged and ignored (TorchServe ignores them); TorchServe keys with no meaning here are logged
with the reason. Every bad value raises ConfigError naming the key, the value, what is accepted and where the
value came from.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import fields
from pathlib import Path
from typing import Any

from serve.config import environment, gpus
from serve.config.keys import CLI_ONLY, NO_EFFECT, READERS
from serve.config.logs import check_log_config
from serve.config.properties import read_properties
from serve.config.settings import Settings
from serve.config.snapshots import latest_snapshot
from serve.config.values import parse_address
from serve.errors import ConfigError

log = logging.getLogger(__name__)
DEFAULT_CONFIG_FILE = Path("config.properties")
# TorchServe's switches whose environment variable beats the command-line flag (its token and model-control tests)
ENV_OVER_CLI = ("disable_token_authorization", "enable_model_api")


def load_settings(cli: dict[str, Any] | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Settings from the config file, the environment and `cli` (Settings field names and "ts_config";
    None values are ignored, so unset flags can be passed as they are)."""
    env = environment.current() if environ is None else environ
    given = {k: v for k, v in (cli or {}).items() if v is not None}
    unknown = sorted(set(given) - set(READERS) - set(CLI_ONLY) - {"ts_config"})
    if unknown:
        raise ConfigError(f"unknown setting(s) {', '.join(unknown)}; expected names of serve.config.Settings fields")
    config_file = _config_file(given.pop("ts_config", None), env)
    out: dict[str, Any] = _from_file(config_file, env) if config_file else {}
    cli_values = {key: _read(key, value, "the command line") for key, value in given.items()}
    env_values: dict[str, Any] = {}
    if cli_values.get("enable_envvars_config", out.get("enable_envvars_config", False)):
        allow_urls = cli_values.get("use_env_allowed_urls", out.get("use_env_allowed_urls", False))
        for key, (value, name) in environment.overrides(env, READERS, allowed_urls=allow_urls).items():
            env_values[key] = _read(key, value, f"environment variable {name}")
    if environment.LOG_LOCATION_VAR in env:
        out["log_location"] = _read("log_location", env[environment.LOG_LOCATION_VAR], "environment LOG_LOCATION")
    out.update(env_values)
    out.update(cli_values)
    out.update({key: env_values[key] for key in ENV_OVER_CLI if key in env_values})
    out["number_of_gpu"], out["gpu_uuids"] = _gpus(out.get("number_of_gpu"), env)
    return _finish(out, config_file)


def _gpus(configured: int | None, env: Mapping[str, str]) -> tuple[int, tuple[str, ...]]:
    """(number_of_gpu, the UUIDs of those GPUs): the visible GPUs, or the configured number capped by them."""
    found = gpus.visible_gpus(env)
    if found is None:
        if configured:
            log.warning("number_of_gpu = %d is used unchecked: nvidia-smi could not list the GPUs", configured)
        return configured or 0, ()
    if configured is not None and configured > len(found):
        log.warning("number_of_gpu = %d is capped to %d: only %d GPU(s) are visible (nvidia-smi -L, %s=%s)",
                    configured, len(found), len(found), gpus.VISIBLE_DEVICES_VAR,
                    env.get(gpus.VISIBLE_DEVICES_VAR, "<unset>"))  # fmt: skip
    number = len(found) if configured is None else min(configured, len(found))
    if number:
        log.info("using %d GPU(s): %s", number, ", ".join(f"cuda:{i} = {g.name} ({g.uuid})"
                                                          for i, g in enumerate(found[:number])))  # fmt: skip
    return number, tuple(g.uuid for g in found[:number])


def _config_file(cli_value: Any, env: Mapping[str, str]) -> Path | None:
    for value, source in ((env.get(environment.CONFIG_FILE_VAR), "TS_CONFIG_FILE"), (cli_value, "--ts-config")):
        if value:
            path = Path(str(value)).expanduser()
            if not path.is_file():
                raise ConfigError(f"{source} = '{value}' is not valid: the file does not exist")
            return path.absolute()
    return DEFAULT_CONFIG_FILE.absolute() if DEFAULT_CONFIG_FILE.is_file() else None


def _from_file(path: Path, env: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in read_properties(path, env).items():
        if key in READERS:
            out[key] = _read(key, value, f"config file {path}")
        elif key in NO_EFFECT:
            log.warning("%s: %s is ignored: %s", path, key, NO_EFFECT[key])
        else:
            log.warning("%s: unknown key %r is ignored (check its spelling)", path, key)
    return out


def _read(key: str, value: Any, source: str) -> Any:
    reader = READERS.get(key) or CLI_ONLY[key]
    try:
        return reader(key, value)
    except ConfigError as e:
        raise ConfigError(f"{e} (from {source})") from None


def _finish(out: dict[str, Any], config_file: Path | None) -> Settings:
    """Paths made absolute, cross-key checks, the snapshot to restore."""
    for f in fields(Settings):
        value = out.get(f.name, f.default)
        if isinstance(value, Path) and f.name != "snapshot_dir":
            out[f.name] = value.absolute()
    snapshot_dir = out["log_location"] / "config"
    if not out.get("ncs", False):
        snapshot = latest_snapshot(snapshot_dir)
        if snapshot is not None:
            out["model_snapshot"] = snapshot
    settings = Settings(**out, snapshot_dir=snapshot_dir, config_file=config_file)
    _check(settings)
    return settings


def _check(settings: Settings) -> None:
    for key in ("model_store", "workflow_store"):
        store = getattr(settings, key)
        if store is not None and not store.is_dir():
            raise ConfigError(f"{key} = '{store}' is not valid: no such directory; create it or fix the path")
    for key in ("private_key_file", "certificate_file", "metrics_config"):
        file = getattr(settings, key)
        if file is not None and not file.is_file():
            raise ConfigError(f"{key} = '{file}' is not valid: the file does not exist")
    for f in fields(Settings):
        if f.name.endswith("_address") and not f.name.startswith("grpc"):
            _check_tls(settings, f.name)
    if settings.log_config is not None:
        check_log_config(settings.log_config)


def _check_tls(settings: Settings, key: str) -> None:
    address = getattr(settings, key)
    if parse_address(address)[2] and (settings.private_key_file is None or settings.certificate_file is None):
        raise ConfigError(
            f"{key} = {address!r} uses https, which needs private_key_file and certificate_file (PEM files); "
            "set both, or use http"
        )
