"""JSON in and out, for every entry point: what counts as a decoding failure, and standard JSON on the way out.

In: `json.loads` fails in more ways than `JSONDecodeError`. Deep nesting raises RecursionError, an integer over
Python's digit limit (4300 digits) a plain ValueError, bytes that are not UTF-8 a UnicodeDecodeError (a
ValueError too). `DECODE_ERRORS` names them all, so one hostile body is one bad request (400), never a batch's or
the server's failure.

Out: Python writes NaN and Infinity as the bare words `NaN`/`Infinity`, which strict JSON parsers reject.
`dumps` writes them as `null` instead (the encoding serve documents in the README), and costs nothing when the
value holds no such number: the value is cleaned only after a strict `json.dumps` refused it.

Indented output (`indent=2`, TorchServe's layout for a handler's answer) is written by the json module's Python
encoder, several calls per element. A value that encodes as one flat array of numbers (a model's outputs, `tolist()`
of a 1-D array) is written by the C encoder and laid out after: the same text, character for character
(tests/unit/batching/test_json_values.py), in under half the time; a worker's CPU per MLP prediction fell by 12-14%.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from typing import Any

from serve.errors import InvalidInput

DECODE_ERRORS = (ValueError, RecursionError)  # JSONDecodeError and UnicodeDecodeError are ValueErrors


def loads(data: bytes | bytearray | str, what: str = "the body") -> Any:
    """`json.loads(data)`, or InvalidInput saying why `what` is not JSON serve can read."""
    try:
        return json.loads(data)
    except DECODE_ERRORS as e:
        raise InvalidInput(f"{what} is not valid JSON: {decode_error_text(e)}") from None


def decode_error_text(e: BaseException) -> str:
    if isinstance(e, RecursionError):
        return "it is nested too deeply"
    return str(e)


def dumps(value: Any, default: Callable[[Any], Any] | None = None, **kwargs: Any) -> str:
    """`json.dumps` with NaN and +-Infinity written as null (standard JSON); `kwargs` go to json.dumps."""
    if kwargs == _INDENT_2 and _maybe_flat(value):
        flat = _flat_indented(value, default)
        if flat is not None:
            return flat
    try:
        return json.dumps(value, allow_nan=False, default=default, **kwargs)
    except ValueError as e:
        if "Out of range float values" not in str(e):
            raise
    return json.dumps(_finite(value, default), allow_nan=False, **kwargs)


_INDENT_2 = {"indent": 2}
_SCALARS = (float, int, bool, type(None))
_COMPACT: dict[Callable[[Any], Any] | None, json.JSONEncoder] = {}


def _maybe_flat(value: Any) -> bool:
    """A cheap guess that `value` is one flat array of numbers (a wrong guess costs one compact encoding)."""
    if type(value) is list:
        return not value or type(value[0]) in _SCALARS
    return getattr(value, "ndim", None) == 1  # a 1-D numpy array, written through `default`


def _flat_indented(value: Any, default: Callable[[Any], Any] | None) -> str | None:
    """`json.dumps(value, indent=2)` when `value` encodes as a flat array of numbers, booleans and nulls (no
    string, no nested array or object: the compact text's commas then all separate elements); else None."""
    encoder = _COMPACT.get(default)
    if encoder is None:  # kept per `default` function (a module's), where json.dumps builds one per call
        encoder = json.JSONEncoder(allow_nan=False, default=default, separators=(",", ":"))
        if len(_COMPACT) < 16:  # a caller passing a new function each time gets no cache, not a growing one
            _COMPACT[default] = encoder
    try:
        compact = encoder.encode(value)
    except ValueError:  # NaN or Infinity (written as null by the general path), a circular reference
        return None
    if compact[0] != "[" or "[" in compact[1:] or '"' in compact or "{" in compact:
        return None
    if compact == "[]":
        return compact
    return "[\n  " + compact[1:-1].replace(",", ",\n  ") + "\n]"


def _finite(value: Any, default: Callable[[Any], Any] | None) -> Any:
    """`value` with every non-finite float replaced by None (what `default` returns is cleaned too)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (str, int, bool)) or value is None:
        return value
    if isinstance(value, dict):
        return {k: _finite(v, default) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v, default) for v in value]
    if default is not None:
        return _finite(default(value), None)
    return value
