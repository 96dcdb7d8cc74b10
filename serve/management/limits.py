"""Caps on worker processes, checked before any worker is started.

Every way to ask for workers (REST register `initial_workers` and scale `min_worker`/`max_worker`, gRPC
`RegisterModel`/`ScaleWorker`, an archive's model-config `minWorkers`/`maxWorkers`, the `models` property, a
snapshot restored at start) ends in `ModelRegistry`, which calls `check_worker_counts` before the pool forks:
- a negative count is refused;
- min and max workers of one model version are each at most `max_workers_per_model`;
- the workers of all models and versions, with this version's current count replaced by the count the request
  leaves it with, are at most `max_workers`.
A refusal is InvalidInput (400 / INVALID_ARGUMENT) naming the count, the cap, the config key that raises it and
how many workers exist already. Workers counted are those running or (re)starting, not those stopping or FAILED.
The pool then starts an allowed scale-up a few workers at a time (serve/management/workers.py).
"""

from __future__ import annotations

from serve.config import Settings
from serve.errors import InvalidInput


def workers_after(current: int, low: int, high: int) -> int:
    """How many workers a pool has after scaling to (low, high): started up to low, stopped down to high."""
    return min(max(current, low), high)


def check_worker_counts(settings: Settings, where: str, low: tuple[str, int], high: tuple[str, int],
                        current: int, others: int) -> None:  # fmt: skip
    """Refuse (low, high) for the version `where` (e.g. 'model m version 1.0') holding `current` workers, while
    the other versions hold `others`; each count comes with the name the caller gave it (min_worker, minWorkers)."""
    for name, value in (low, high):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InvalidInput(f"Invalid {name} value: {value!r}; it must be an integer >= 0")
    now = f"{where} has {current} worker(s) now, all models {current + others}"
    per_model = settings.max_workers_per_model
    for name, value in (low, high):
        if value > per_model:
            raise InvalidInput(f"{name} {value} exceeds max_workers_per_model {per_model} (config key "
                               f"max_workers_per_model); {now}")  # fmt: skip
    total = others + workers_after(current, low[1], max(high[1], low[1]))
    if total > settings.max_workers:
        raise InvalidInput(f"{low[0]} {low[1]} would bring the workers of all models to {total}, over max_workers "
                           f"{settings.max_workers} (config key max_workers); {now}")  # fmt: skip
