"""`FloodGuard`: a connection whose client sends frames that cost us work and do it none is ended with
ENHANCE_YOUR_CALM (RFC 9113 section 10.5).

All of a server's connections share one event loop, so a client that keeps it busy with cheap frames delays every
other client's REST and gRPC calls. Which frames are cheap for the client and not for us:
- *idle frames*: PING and SETTINGS (each answered with an acknowledgement), WINDOW_UPDATE, PRIORITY, an empty DATA
  frame that does not end its stream, an empty CONTINUATION, a frame of an unknown type. Legitimate clients send
  them in proportion to what the connection does: a WINDOW_UPDATE or a BDP PING for the DATA we send them, a
  SETTINGS at the start. So a client may send IDLE_FRAMES_PER_SECOND of them in any one second, plus
  IDLE_FRAMES_PER_SENT_FRAME for every DATA or HEADERS frame we sent it in that second (our acknowledgements do
  not count, or each PING would pay for the next two); grpc's C core cut the same floods off after about 1,000
  PINGs;
- *resets*: a stream the client opens and resets at once costs us a call and it nothing ("rapid reset",
  CVE-2023-44487), and a stream that breaks the protocol costs us a reset: more than RESETS_PER_SECOND of the two
  together in one second end the connection.
The counts start again every second, so a long-lived connection is judged on its current behaviour only.
"""

from __future__ import annotations

import time

from serve.frontends.grpc.http2 import errors
from serve.frontends.grpc.http2.errors import ConnectionError

IDLE_FRAMES_PER_SECOND = 1000
IDLE_FRAMES_PER_SENT_FRAME = 2
RESETS_PER_SECOND = 200


class FloodGuard:
    __slots__ = ("_idle", "_resets", "_since", "sent")

    def __init__(self) -> None:
        self._since = time.monotonic()
        self._idle = self._resets = 0
        self.sent = 0  # DATA and HEADERS frames we sent in the current second (the connection counts them)

    def idle_frame(self, what: str) -> None:
        """One more frame that did no work; ConnectionError(ENHANCE_YOUR_CALM) past the allowance."""
        self._idle += 1
        if self._idle > IDLE_FRAMES_PER_SECOND + IDLE_FRAMES_PER_SENT_FRAME * self.sent and self._expired():
            raise ConnectionError(f"more than {self._idle - 1} frames that do no work ({what} the last) in one second",
                                  errors.ENHANCE_YOUR_CALM)  # fmt: skip

    def reset(self) -> None:
        """One more stream reset by the client or failed by its error."""
        self._resets += 1
        if self._resets > RESETS_PER_SECOND and self._expired():
            raise ConnectionError(f"more than {RESETS_PER_SECOND} streams reset by the client or failed by its "
                                  "errors in one second", errors.ENHANCE_YOUR_CALM)  # fmt: skip

    def _expired(self) -> bool:
        """Past an allowance: True when it was spent within the current second (the caller ends the connection),
        else the counts start a new second and False."""
        now = time.monotonic()
        if now - self._since < 1.0:
            return True
        self._since = now
        self._idle = self._resets = self.sent = 0
        return False
