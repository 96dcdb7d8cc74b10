"""Triton's sequence request parameters (the `sequence` extension) as the sequence headers the model's router reads.

    headers.update(sequence_headers(request.parameters))

`sequence_id` (a non-zero integer or a non-empty string: Triton's correlation id), `sequence_start` and
`sequence_end` (booleans) become `ts_request_sequence_id` / `_start` / `_end`, TorchServe's headers, which
serve/management/sequences.py routes by for a model with `sequenceBatching: true` and the handler reads through
`context.get_sequence_id(idx)` and `context.get_request_header(idx, "ts_request_sequence_start")`. Triton's rules
apply to v2 requests there: a new id needs `sequence_start`. A `sequence_id` of 0 or "" means "no sequence", as in
Triton. A parameter of the wrong type is a 400 naming it (the same on REST, where it is JSON, and gRPC, where it
is an InferParameter: int64_param, uint64_param or string_param for the id, bool_param for the flags).
"""

from __future__ import annotations

from typing import Any

from serve.errors import InvalidInput
from serve.management.sequences import SEQUENCE_END, SEQUENCE_ID, SEQUENCE_START


def sequence_headers(parameters: dict[str, Any]) -> dict[str, str]:
    """The sequence headers of a v2 request's parameters; {} when it names no sequence."""
    sequence_id = parameters.get("sequence_id")
    if isinstance(sequence_id, bool) or not isinstance(sequence_id, (int, str, type(None))):
        raise InvalidInput(f"parameter sequence_id must be an integer or a string, got {sequence_id!r}")
    flags = {}
    for name in ("sequence_start", "sequence_end"):
        value = parameters.get(name, False)
        if not isinstance(value, bool):
            raise InvalidInput(f"parameter {name} must be a boolean, got {value!r}")
        flags[name] = value
    if sequence_id is None or sequence_id == 0 or sequence_id == "":
        if flags["sequence_start"] or flags["sequence_end"]:
            raise InvalidInput("parameters sequence_start and sequence_end need a sequence_id (non-zero integer or "
                               "non-empty string)")  # fmt: skip
        return {}
    headers = {SEQUENCE_ID: str(sequence_id)}
    for header, name in ((SEQUENCE_START, "sequence_start"), (SEQUENCE_END, "sequence_end")):
        if flags[name]:  # only a true flag is sent, as TorchServe's frontend sends its headers
            headers[header] = "true"
    return headers
