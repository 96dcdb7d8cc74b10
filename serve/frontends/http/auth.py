"""Token authorization (TorchServe >= 0.11.1, spec section 6): three keys in `key_file.json`, Bearer tokens.

At start three keys are made: `management` (management API), `inference` (inference API) and `API` (only for
`GET /token?type=management|inference`, which rotates the other two). The file is pretty JSON with TorchServe's
layout, written with mode 0600:

    {"management": {"key": "...", "expiration time": "2024-02-16T21:12:24.801167Z"},
     "inference": {"key": "...", "expiration time": "..."}, "API": {"key": "..."}}

Management and inference keys expire `token_expiration_min` minutes after they were made; the API key never does.

Decisions (differences from TorchServe):
- A missing, malformed, wrong or expired key is 401 (TorchServe: 400 InvalidKeyException) with TorchServe's message
  (clients match on it) followed by which key is expected and what was wrong.
- `/ping`, `/metrics`, `OPTIONS /`, `/api-description` and the OpenAPI page stay open, so Kubernetes probes and
  Prometheus scrapers need no key (TorchServe guards `/ping`: pain point 2).
- Keys are 16 random bytes, URL-safe base64 (TorchServe: 6 bytes); clients treat them as opaque strings.
- `GET /token` answers the rotated key and its expiry (TorchServe answers an empty body and rewrites the file).
"""

from __future__ import annotations

import dataclasses
import datetime
import hmac
import json
import os
import re
import secrets
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from serve.errors import InvalidInput, Unauthorized

if TYPE_CHECKING:
    from serve.config import Settings

MANAGEMENT, INFERENCE, API = "management", "inference", "API"
FAILED = "Token Authorization failed. Token either incorrect, expired, or not provided correctly"  # TorchServe's words
_BEARER = re.compile(r"^Bearer\s+(\S+)$", re.IGNORECASE)  # the scheme is case-insensitive (RFC 7235)


@dataclasses.dataclass
class Key:
    key: str
    expires_at: float | None  # epoch seconds; None never expires

    def entry(self) -> dict[str, str]:
        if self.expires_at is None:
            return {"key": self.key}
        stamp = datetime.datetime.fromtimestamp(self.expires_at, datetime.UTC)
        return {"key": self.key, "expiration time": stamp.strftime("%Y-%m-%dT%H:%M:%S.%fZ")}


class TokenAuth:
    """The server's keys; `check()` guards a request, `rotate()` renews a key. Disabled: everything passes."""

    def __init__(self, key_file: Path, expiration_min: float, enabled: bool = True,
                 clock: Callable[[], float] = time.time) -> None:  # fmt: skip
        self.key_file = Path(key_file)
        self.expiration_s = expiration_min * 60
        self.enabled = enabled
        self._clock = clock
        self._keys: dict[str, Key] = {}
        if enabled:
            self._keys = {MANAGEMENT: self._new_key(), INFERENCE: self._new_key(), API: Key(_token(), None)}
            self.write()

    @classmethod
    def from_settings(cls, settings: Settings) -> TokenAuth:
        return cls(settings.key_file, settings.token_expiration_min, not settings.disable_token_authorization)

    def key(self, kind: str) -> str:
        return self._keys[kind].key

    def check(self, kind: str, authorization: str | None) -> None:
        """Raise Unauthorized unless `authorization` is `Bearer <the current, unexpired key of kind>`."""
        if not self.enabled:
            return
        expected = self._keys[kind]
        where = f"Send the header 'Authorization: Bearer <key>' with the {kind} key from {self.key_file}"
        if not authorization:
            raise Unauthorized(f"{FAILED}: no Authorization header. {where}")
        match = _BEARER.match(authorization.strip())
        if match is None:
            raise Unauthorized(f"{FAILED}: the Authorization header is not 'Bearer <key>'. {where}")
        if not hmac.compare_digest(match.group(1).encode(), expected.key.encode()):
            raise Unauthorized(f"{FAILED}: the key is not the current {kind} key. {where}")
        if expected.expires_at is not None and self._clock() >= expected.expires_at:
            raise Unauthorized(
                f"{FAILED}: the {kind} key has expired. Rotate it with "
                f"GET /token?type={kind} and the API key on the management port, then read {self.key_file}"
            )

    def rotate(self, kind: str | None, authorization: str | None) -> dict[str, Any]:
        """`GET /token?type=`: the API key renews the management or inference key; returns its new entry."""
        if not self.enabled:
            raise InvalidInput("Token authorization is disabled (disable_token_authorization): no key to rotate")
        self.check(API, authorization)
        if kind not in (MANAGEMENT, INFERENCE):
            raise InvalidInput(f"Invalid token type: {kind!r}; use type=management or type=inference")
        self._keys[kind] = self._new_key()
        self.write()
        return {kind: self._keys[kind].entry()}

    def write(self) -> None:
        """Write the key file with mode 0600, replacing it atomically (no moment where it is readable by others)."""
        content = json.dumps({kind: key.entry() for kind, key in self._keys.items()}, indent=2) + "\n"
        tmp = self.key_file.with_name(self.key_file.name + ".tmp")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # O_CREAT's mode does not apply to a file left over from a crash
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(content)
        os.replace(tmp, self.key_file)

    def remove_key_file(self) -> None:
        """At shutdown, like `torchserve --stop` deletes its key file."""
        if self.enabled:
            self.key_file.unlink(missing_ok=True)

    def _new_key(self) -> Key:
        return Key(_token(), self._clock() + self.expiration_s)


def _token() -> str:
    return secrets.token_urlsafe(16)
