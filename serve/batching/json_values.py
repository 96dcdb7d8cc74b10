"""JSON in and out, for every entry point: what counts as a decoding failure, and standard JSON on the way out.

In: `json.loads` fails in more ways than `JSONDecodeError`. Deep nesting raises RecursionError, an integer over
Python's digit limit (4300 digits) a plain ValueError, bytes that are not UTF-8 a UnicodeDecodeError (a
ValueError too). `DECODE_ERRORS` names them all, so one hostile body is one bad request (400), never a batch's or
the server's failure.

Out: Python writes NaN and Infinity as the bare words `NaN`/`Infinity`, which strict JSON parsers reject.
`dumps` writes them as `null` instead (the encoding serve documents in the README), and costs nothing when the
value holds no such number: the value is cleaned only after a strict `json.dumps` refused it.
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
    try:
        return json.dumps(value, allow_nan=False, default=default, **kwargs)
    except ValueError as e:
        if "Out of range float values" not in str(e):
            raise
    return json.dumps(_finite(value, default), allow_nan=False, **kwargs)


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
