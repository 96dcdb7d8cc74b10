"""The environment: the only module of the serving stack that reads `os.environ`.

Always read (as TorchServe): `TS_CONFIG_FILE` (the config file to use) and `LOG_LOCATION` (logs and snapshots).
With `enable_envvars_config=true`, `TS_<KEY>` overrides config key `<key>` (`TS_INFERENCE_ADDRESS`,
`TS_JOB_QUEUE_SIZE`, ...; the one irregular name is TorchServe's `TS_TOKEN_EXPIRATION_TIME_MIN` for
`token_expiration_min`). `TS_ALLOWED_URLS` additionally needs `use_env_allowed_urls=true`, so that an environment
cannot widen the URL allow-list behind the config file's back. Not settable from the environment: `models` and
`model_snapshot` (per-model settings, as TorchServe), and the two switches above.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping

CONFIG_FILE_VAR = "TS_CONFIG_FILE"
LOG_LOCATION_VAR = "LOG_LOCATION"
_IRREGULAR = {"token_expiration_min": "TS_TOKEN_EXPIRATION_TIME_MIN"}
NOT_FROM_ENV = frozenset({"models", "model_snapshot", "enable_envvars_config", "use_env_allowed_urls", "log_location"})


def current() -> Mapping[str, str]:
    """The process environment."""
    return os.environ


def env_name(key: str) -> str:
    """The variable that overrides config key `key`."""
    return _IRREGULAR.get(key, "TS_" + key.upper())


def overrides(environ: Mapping[str, str], keys: Iterable[str], *, allowed_urls: bool) -> dict[str, tuple[str, str]]:
    """{key: (value, variable name)} for every set `TS_*` variable among `keys`."""
    out: dict[str, tuple[str, str]] = {}
    for key in keys:
        if key in NOT_FROM_ENV or (key == "allowed_urls" and not allowed_urls):
            continue
        name = env_name(key)
        if name in environ:
            out[key] = (environ[name], name)
    return out
