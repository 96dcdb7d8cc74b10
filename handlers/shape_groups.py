"""A batch's requests grouped by the shape and dtype of their input, each group run through the model on its own.

    groups = ShapeGroups(Group(key, indices, batch, rows) ...)   # what a handler's preprocess returns
    results = run_groups(groups, run, answered, fail)             # BaseHandler.handle runs them

Why: a batch is one stacked tensor, so requests of different shapes cannot share a forward. Stacking by the shape
of the first request that decoded let a bad request that arrived first condemn its good batch-mates (or the good
ones condemn a request the model would have taken), and numpy's type promotion let one integer request turn a
float32 batch into float64, which the model then refused for everyone. Grouping makes each request's answer
independent of its batch-mates and of the order of arrival: every request runs with the requests like it.

Decisions:
- A batch of one shape (the normal case) is one group and one forward, as before; each further shape in a batch
  costs one more forward of its own requests.
- A group the model fails on answers only its own requests:
  - a PredictionException raised for the group: its code; InvalidInput: 400 with its message;
  - a shape the model has never answered while it has answered another one (in this batch or an earlier one; the
    model-config's `example_input_shape` counts as answered): 400 naming the shapes it answers, with the model's
    error, since the request's input is the one thing that differs;
  - otherwise (a shape it answered before, or no shape answered yet) nothing says the input is at fault: when no
    group of the batch got an answer the exception fails the batch as it always did (the worker's 503 "Prediction
    failed"); when other groups did, 503 with the same text for this group's requests.
- Out of memory (MemoryError, a GPU's) and a GPU error that leaves the device unusable are never the input's: they
  fail the batch at once, so the worker frees memory or exits as it does for any batch (serve/worker/gpu.py).
- The shapes answered are remembered per handler, at most MAX_ANSWERED (a model that takes any size would grow the
  set forever); the oldest is forgotten first.
"""

from __future__ import annotations

import dataclasses
import logging
import traceback
from collections.abc import Callable, Hashable, Iterable
from typing import Any, TypeVar

from serve.errors import InvalidInput, PredictionException
from serve.worker import gpu

logger = logging.getLogger(__name__)

MAX_ANSWERED = 32
MAX_ERROR_TEXT = 300  # characters of the model's error quoted in a 400
SHOWN_SHAPES = 3  # answered shapes a 400 names, the most recent first

Key = tuple[tuple[int, ...], str]  # one request's input shape (without the batch dimension) and dtype name
Fail = Callable[[int, int, str, str], None]  # (batch index, status, message, error type)
K = TypeVar("K", bound=Hashable)


@dataclasses.dataclass
class Group:
    """The requests of one batch that share an input shape and dtype."""

    key: Key
    indices: list[int]  # their batch indices, ascending
    batch: Any  # what the handler's `inference` takes: their inputs stacked
    rows: list[Any] = dataclasses.field(default_factory=list)  # per request, what the handler's postprocess needs


class ShapeGroups(list[Group]):
    """What a preprocess returns to have BaseHandler.handle run each group through inference and postprocess."""


def group_indices(keys: Iterable[K]) -> dict[K, list[int]]:
    """The positions of each key, keys in the order they first appear."""
    groups: dict[K, list[int]] = {}
    for position, key in enumerate(keys):
        groups.setdefault(key, []).append(position)
    return groups


def describe(key: Key) -> str:
    shape, dtype = key
    return f"{tuple(shape)} {dtype}".rstrip()  # dtype "": the handler does not key by dtype


class AnsweredShapes:
    """The input keys the model has answered, newest last, at most MAX_ANSWERED."""

    def __init__(self, seed: Iterable[Key] = ()) -> None:
        self._keys: dict[Key, None] = {}
        for key in seed:
            self.add(key)

    def add(self, key: Key) -> None:
        self._keys.pop(key, None)
        self._keys[key] = None
        while len(self._keys) > MAX_ANSWERED:
            del self._keys[next(iter(self._keys))]

    def __contains__(self, key: object) -> bool:
        return key in self._keys

    def __bool__(self) -> bool:
        return bool(self._keys)

    def shown(self) -> str:
        recent = list(self._keys)[::-1][:SHOWN_SHAPES]
        return " or ".join(describe(k) for k in recent)


def run_groups(groups: list[Group], run: Callable[[Group], list[Any]], answered: AnsweredShapes,
               fail: Fail) -> list[Any]:  # fmt: skip
    """`run(group)` (inference and postprocess of its batch, one result per request) for each group: the results of
    the requests answered, in batch order; `fail` answers the requests of each group that failed (module docstring)."""
    results: dict[int, Any] = {}
    failed: list[tuple[Group, Exception]] = []
    for group in groups:
        try:
            out = run(group)
        except Exception as error:
            if not _confinable(error):
                raise
            failed.append((group, error))
            continue
        if len(out) != len(group.indices):
            raise RuntimeError(f"postprocess returned {len(out)} results for a group of {len(group.indices)} requests "
                               "of one shape: it must return one result per request")  # fmt: skip
        answered.add(group.key)
        results.update(zip(group.indices, out))
    verdicts = [(group, _verdict(group, e, answered)) for group, e in failed]
    if failed and not results and all(v is None for _, v in verdicts):
        raise failed[0][1]  # nothing answered and nothing blames the input: the batch fails as it always did
    for (group, verdict), (_, e) in zip(verdicts, failed):
        if verdict is None:
            logger.error("the model failed on a group of %d requests of input %s:\n%s", len(group.indices),
                         describe(group.key), "".join(traceback.format_exception(e)).rstrip())  # fmt: skip
            verdict = (503, f"Prediction failed: {type(e).__name__}: {e}", "InternalServerException")
        code, message, error_type = verdict
        for idx in group.indices:
            fail(idx, code, message, error_type)
    return [results[i] for i in sorted(results)]


def _confinable(e: Exception) -> bool:
    """False for errors of the process, not of a request: memory ran out, or the GPU is unusable."""
    return not (isinstance(e, MemoryError) or gpu.is_out_of_memory(e) or gpu.is_fatal(e))


def _verdict(group: Group, e: Exception, answered: AnsweredShapes) -> tuple[int, str, str] | None:
    """(status, message, error type) when the failure is the group's input's, else None."""
    if isinstance(e, PredictionException):
        return e.code, e.message, "PredictionException"
    if isinstance(e, InvalidInput):
        return 400, str(e), "InvalidInput"
    if group.key in answered or not answered:
        return None
    text = f"{type(e).__name__}: {e}"
    if len(text) > MAX_ERROR_TEXT:
        text = text[:MAX_ERROR_TEXT] + "..."
    logger.warning("the model failed on input %s, which it has never answered: %s", describe(group.key), text)
    return 400, (f"the model failed on this request's input of shape {describe(group.key)} ({text}); it answers "
                 f"inputs of shape {answered.shown()}: send an array of that shape"), "InvalidInput"  # fmt: skip
