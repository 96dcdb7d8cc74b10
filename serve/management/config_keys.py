"""TorchServe model-config YAML keys that serve does not implement: refused at registration, or warned about.

    ignored = unsupported_keys(yaml, where)   # InvalidInput (400) naming a refused key; else the warned keys

Nothing is silently ignored. A key whose setting would change how requests are answered, were it honoured, is
refused with a 400 that names it and says it is not supported (a model that relies on it would misbehave):
`stateful`, `useJobTicket`, `asyncCommunication` when true,
`parallelType` when not empty, `parallelLevel` over 1 and `clientTimeoutInMills` over 0. A key that is harmless
to leave out (the sequence-batching limits without `sequenceBatching: true`; `useVenv`;
`pt2`, TorchServe's torch.compile / AOTInductor settings, where serve runs its own inference plan) is warned about
once, at registration, in the log, and describe lists it under `ignoredConfigKeys`. Every other key either is
ours or TorchServe's and honoured, or reaches the handler as `context.model_yaml_config` (the `handler:` section).
`sequenceBatching: true` and its limits `maxNumSequence`, `maxSequenceJobQueueSize`, `sequenceMaxIdleMSec`,
`sequenceTimeoutMSec` are honoured (serve/management/sequences.py).
`continuousBatching: true` is honoured when the handler declares `continuous = True`: the worker checks it at load
and refuses the registration (400) naming what the handler lacks otherwise (serve/worker/continuous.py).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from serve.errors import InvalidInput

log = logging.getLogger(__name__)


def _true(value: Any) -> bool:
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def _set(value: Any) -> bool:
    return value is not None


def _over(limit: int) -> Callable[[Any], bool]:
    return lambda value: isinstance(value, (int, float)) and not isinstance(value, bool) and value > limit


# key -> when its value asks for what serve does not do
REFUSED: dict[str, Callable[[Any], bool]] = {
    "stateful": _true,
    "useJobTicket": _true,
    "asyncCommunication": _true,
    "parallelType": lambda value: bool(value),
    "parallelLevel": _over(1),
    "clientTimeoutInMills": _over(0),
}
# key -> when setting it is worth a warning
SEQUENCE_LIMITS = ("maxNumSequence", "maxSequenceJobQueueSize", "sequenceMaxIdleMSec", "sequenceTimeoutMSec")
WARNED: dict[str, Callable[[Any], bool]] = {
    **dict.fromkeys(SEQUENCE_LIMITS, _set),
    "useVenv": _true,
    "pt2": _set,
}


def unsupported_keys(yaml: Mapping[str, Any], where: str) -> tuple[str, ...]:
    """Raise InvalidInput for the first refused key set in `yaml`; else warn about and return the ignored ones."""
    for key, asks in REFUSED.items():
        if key in yaml and asks(yaml[key]):
            raise InvalidInput(f"{where}: {key}={yaml[key]!r} is not supported by serve; remove it from the "
                               "model-config YAML (see the README's model-config keys)")  # fmt: skip
    honoured = SEQUENCE_LIMITS if _true(yaml.get("sequenceBatching")) else ()
    ignored = tuple(key for key, matters in WARNED.items()
                    if key in yaml and key not in honoured and matters(yaml[key]))  # fmt: skip
    if ignored:
        log.warning("%s: model-config keys not supported by serve and ignored: %s", where, ", ".join(ignored))
    return ignored
