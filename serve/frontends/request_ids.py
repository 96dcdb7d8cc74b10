"""Request ids: UUID-shaped strings, unique within the server process, without a system call per request.

`uuid.uuid4()` reads 16 bytes from the kernel's random source for every request (a system call, and a UUID object
to format). An id only has to be unique, not secret, so each process draws one random UUID at start and numbers its
requests in the last group: `6f1c2a4e-93b0-4d5e-8a7f-000000000001`, `...-000000000002`, ... Each id still reads as
a version-4 UUID (its version and variant digits are the random UUID's), so clients that parse TorchServe's
`x-request-id` keep working; 2^48 requests fit before the counter wraps.
"""

from __future__ import annotations

import itertools
import uuid

_PREFIX = str(uuid.uuid4())[:24]  # "xxxxxxxx-xxxx-4xxx-yxxx-"
_COUNTER = itertools.count(1)
_MASK = (1 << 48) - 1


def new_request_id() -> str:
    return f"{_PREFIX}{next(_COUNTER) & _MASK:012x}"
