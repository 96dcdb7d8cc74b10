"""One gRPC call on an HTTP/2 stream (the gRPC over HTTP/2 protocol): its messages, deadline, context and status.

`Call` is the stream's listener (http2/connection.py). It reads the request headers (path, `grpc-timeout`,
`grpc-encoding`, metadata), cuts the body into length-prefixed messages, runs the method's handler in a task, and
answers: response headers before the first message, each message length-prefixed, then trailers with
`grpc-status` and `grpc-message` (or one trailers-only header block when the call fails before any message).
The handlers are grpcio's own method handlers (what the generated `add_*Servicer_to_server` registers), called as
grpc.aio calls them, with a `Context` that does what our servicers, grpc's health and reflection servicers ask of
grpc.aio's ServicerContext.

Decisions, and why:
- Requests compressed with gzip or deflate (`grpc-encoding`) are read, bounded by the receive limit after
  decompression; answers are sent uncompressed (`grpc-accept-encoding` says what we read). Our answers are
  mostly tensors and short JSON, where compression costs more CPU than the loopback or LAN saves.
- A message above the receive limit ends the call with RESOURCE_EXHAUSTED at its length prefix, before its body
  is buffered; an answer above the send limit likewise.
- The deadline (`grpc-timeout`) cancels the handler's task and answers DEADLINE_EXCEEDED, as grpc.aio does. It is
  kept on the event loop's clock, the clock its timer runs on, and the call remembers that its timer cancelled it:
  the status never depends on comparing two clocks (uvloop keeps time in whole milliseconds, so its timer fires up
  to a millisecond before time.monotonic() reaches the deadline: such a comparison answered 15 of 140 expired calls
  "UNAVAILABLE", which clients retry). Only a
  cancellation that is neither the deadline nor the client's reset (the server stopping) answers UNAVAILABLE. A
  deadline already past when the call arrives (`0m`) answers DEADLINE_EXCEEDED without running the handler.
- Whose fault it is decides the status. The client's: a `grpc-timeout` that is not 1-8 ASCII digits and a unit
  (PROTOCOL-HTTP2.md's TimeoutValue TimeoutUnit), a request that breaks the framing (ends inside a message, says
  "compressed" under identity), a compressed message that does not decompress, is cut short or has bytes after its
  end, and a message that does not deserialize are INVALID_ARGUMENT, answered without a traceback in our log, and
  the handler cannot turn them into another status (the deserializer runs inside the handler's `read`). grpc-c
  answers these INTERNAL ("Error parsing 'grpc-timeout' metadata", "Decompression failed"), which reads as ours,
  and ignores a 9th digit; grpc.aio answers a message that does not parse UNKNOWN. Ours: a handler's exception
  other than `abort` is UNKNOWN with "Unexpected <type>: <message>", grpc.aio's wording, logged with its traceback.
- A stream the client resets cancels the handler's task; nothing more is sent.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import inspect
import logging
import urllib.parse
import zlib
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any, NoReturn

import grpc

from serve.frontends.grpc.http2.connection import Connection
from serve.frontends.grpc.http2.stream import Stream

if TYPE_CHECKING:
    from serve.frontends.grpc.native import Server

log = logging.getLogger(__name__)

RESERVED = frozenset({"content-type", "te", "grpc-timeout", "grpc-encoding", "grpc-accept-encoding"})
ACCEPT_ENCODING = "identity,deflate,gzip"
_TIMEOUT_UNITS = {"H": 3600.0, "M": 60.0, "S": 1.0, "m": 1e-3, "u": 1e-6, "n": 1e-9}
_RESPONSE_HEADERS = [(":status", "200"), ("content-type", "application/grpc"),
                     ("grpc-accept-encoding", ACCEPT_ENCODING)]  # fmt: skip
REQUEST_WAIT = 0.1  # seconds an early status waits for the client's first message (see _run)
QUEUED_BYTES = 1 << 20  # request bytes a call buffers ahead of its handler before the stream's window stops
DEADLINE_EXCEEDED = (grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")


class AbortError(Exception):
    """Raised by Context.abort: ends the handler; the call answers with the status the context holds."""


class Context:
    """What a servicer sees of its call: grpc.aio.ServicerContext's methods that servicers use."""

    def __init__(self, call: Call) -> None:
        self._call = call
        self._code: grpc.StatusCode | None = None
        self._details = ""
        self._trailing: tuple[tuple[str, str | bytes], ...] = ()

    def invocation_metadata(self) -> tuple[tuple[str, str | bytes], ...]:
        return self._call.metadata

    def peer(self) -> str:
        return self._call.connection.peer

    def time_remaining(self) -> float | None:
        deadline = self._call.deadline
        return None if deadline is None else max(0.0, deadline - asyncio.get_running_loop().time())

    def set_code(self, code: grpc.StatusCode) -> None:
        self._code = code

    def set_details(self, details: str) -> None:
        self._details = details

    def code(self) -> grpc.StatusCode | None:
        return self._code

    def details(self) -> str:
        return self._details

    def set_trailing_metadata(self, metadata: Iterable[tuple[str, str | bytes]]) -> None:
        self._trailing = tuple(metadata)

    def cancelled(self) -> bool:
        return self._call.reset

    def done(self) -> bool:
        return self._call.finished

    async def abort(self, code: grpc.StatusCode, details: str = "",
                    trailing_metadata: Iterable[tuple[str, str | bytes]] = ()) -> NoReturn:  # fmt: skip
        if code == grpc.StatusCode.OK:
            raise ValueError("abort needs a status other than OK")
        self._code, self._details = code, details
        if trailing_metadata:
            self._trailing = tuple(trailing_metadata)
        raise AbortError(details)

    async def send_initial_metadata(self, metadata: Iterable[tuple[str, str | bytes]]) -> None:
        self._call.send_headers(list(metadata))

    async def write(self, message: Any) -> None:
        await self._call.send_message(message)

    async def read(self) -> Any:
        return await self._call.read()


class Call:
    """The listener of one request stream, and the task that runs its handler."""

    def __init__(self, server: Server, connection: Connection, stream: Stream) -> None:
        self.server, self.connection, self.stream = server, connection, stream
        self.path = ""
        self.deadline: float | None = None  # on the event loop's clock (loop.time())
        self.reset = self.finished = self._headers_sent = self._expired = False
        self._refused: _Status | None = None  # the client's error, whatever the handler makes of it
        self._buffer = bytearray()
        self._messages: deque[bytes] = deque()
        self._queued = 0  # bytes of whole messages waiting for the handler
        self._held = 0  # bytes not given back to the stream's window while too much waits
        self._ended = False
        self._streaming_request = False  # the method reads a stream of messages (known once its handler is)
        self._arrived = asyncio.Event()
        self._encoding = "identity"
        self._deserialize: Callable[[bytes], Any] | None = None
        self._serialize: Callable[[Any], bytes] | None = None
        self.context = Context(self)
        self.metadata = self._read_headers(stream.headers)
        self._task: asyncio.Task[None] | None = None
        if self.metadata is not None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    # ---- the request ---------------------------------------------------------------------------------------------

    def _read_headers(self, headers: list[tuple[str, str]]) -> Any:
        """The call's metadata, or None when the request is not a gRPC call (it was answered already)."""
        metadata: list[tuple[str, str | bytes]] = []
        method = content_type = ""
        for name, value in headers:
            if name.startswith(":"):
                if name == ":path":
                    self.path = value
                elif name == ":method":
                    method = value
            elif name == "content-type":
                content_type = value
            elif name == "grpc-timeout":
                try:
                    self.deadline = asyncio.get_running_loop().time() + _timeout(value)
                except _Status as malformed:
                    self._refused = malformed
            elif name == "grpc-encoding":
                self._encoding = value
            elif name not in RESERVED:
                metadata.append((name, _binary(value)) if name.endswith("-bin") else (name, value))
        if method != "POST" or not content_type.startswith("application/grpc"):
            status = "405" if method != "POST" else "415"
            self.connection.send_headers(self.stream, [(":status", status)], end_stream=True)
            self.finished = True
            return None
        return tuple(metadata)

    def on_data(self, data: bytes) -> None:
        if self.finished:  # answered already: the rest of the request is read and dropped
            self.connection.consumed(self.stream, len(data))
            return
        buffer = self._buffer
        buffer += data
        taken = 0
        while len(buffer) >= 5:
            length = int.from_bytes(buffer[1:5], "big")
            if length > self.server.max_receive_message_length:
                self._fail_early(grpc.StatusCode.RESOURCE_EXHAUSTED, f"Received message larger than max "
                                 f"({length} vs. {self.server.max_receive_message_length})")  # fmt: skip
                return
            if len(buffer) < 5 + length:
                break
            self._messages.append(bytes(buffer[: 5 + length]))
            del buffer[: 5 + length]
            taken += 5 + length
        self._queued += taken
        if self._streaming_request:  # between two messages a streaming call may rightly go quiet
            self.stream.may_idle = not buffer
        self.connection.buffered(self.stream, self._queued + len(buffer))
        if self._queued > QUEUED_BYTES:  # the handler is behind: the client waits for it through its window
            self._held += len(data)
        else:
            self.connection.consumed(self.stream, len(data))
        if taken:
            self._arrived.set()

    def on_end(self) -> None:
        self._ended = True
        self._arrived.set()

    def on_abort(self, reason: str) -> None:
        """The server closes the connection with this call in flight: UNAVAILABLE (a client may retry it elsewhere),
        and the handler stops."""
        self._finish(grpc.StatusCode.UNAVAILABLE, reason)
        if self._task is not None and not self._task.done():
            self._task.cancel()

    def on_reset(self) -> None:
        self.reset = True
        self._messages.clear()  # the request's bytes go now, not when the garbage collector finds the call's cycle
        self._buffer = bytearray()
        self._queued = 0
        if self._task is not None and not self.finished:
            self._task.cancel()

    async def read(self) -> Any:
        """The next request message, deserialized; grpc.aio.EOF when the client has sent its last."""
        while not self._messages:
            if self._ended:
                if self._buffer:
                    raise _Status(
                        grpc.StatusCode.INVALID_ARGUMENT,
                        "the request ended inside a message: send whole length-prefixed messages",
                    )
                return grpc.aio.EOF
            self._arrived.clear()
            await self._arrived.wait()
        raw = self._messages.popleft()
        self._queued -= len(raw)
        self.connection.buffered(self.stream, self._queued + len(self._buffer))
        if self._held and self._queued <= QUEUED_BYTES:
            self.connection.consumed(self.stream, self._held)
            self._held = 0
        payload = self._decompress(raw) if raw[0] else raw[5:]
        assert self._deserialize is not None
        try:
            return self._deserialize(payload)
        except Exception as exc:  # the client sent bytes that are not the method's request message
            raise self._refuse(f"the request message is not {self.path}'s request: {_shortened(exc)}") from None

    async def _requests(self) -> AsyncIterator[Any]:
        while (message := await self.read()) is not grpc.aio.EOF:
            yield message

    async def _only_request(self) -> Any:
        message = await self.read()
        if message is grpc.aio.EOF:
            raise _Status(grpc.StatusCode.UNIMPLEMENTED, "the client sent no request message to a unary method")
        if await self.read() is not grpc.aio.EOF:
            raise _Status(grpc.StatusCode.UNIMPLEMENTED, "the client sent more than one message to a unary method")
        return message

    def _decompress(self, raw: bytes) -> bytes:
        wbits = {"gzip": 31, "deflate": 15}.get(self._encoding)
        if wbits is None:  # an encoding we do not read is UNIMPLEMENTED; "compressed" with identity, the client's error
            code = grpc.StatusCode.UNIMPLEMENTED if self._encoding != "identity" else grpc.StatusCode.INVALID_ARGUMENT
            raise _Status(code, f"a compressed message with grpc-encoding {self._encoding!r}: send identity, deflate "
                                "or gzip")  # fmt: skip
        limit = self.server.max_receive_message_length
        decompressor = zlib.decompressobj(wbits)
        try:
            payload = decompressor.decompress(memoryview(raw)[5:], limit + 1)
        except zlib.error as exc:
            raise self._refuse(f"a {self._encoding} message that does not decompress: {exc}") from None
        if len(payload) > limit:
            raise _Status(grpc.StatusCode.RESOURCE_EXHAUSTED, f"Received message larger than max "
                          f"({len(payload)}+ vs. {limit}) after {self._encoding} decompression")  # fmt: skip
        if not decompressor.eof:
            raise self._refuse(f"a {self._encoding} message cut short: its compressed stream does not end; send the "
                               "whole compressed message")  # fmt: skip
        if decompressor.unused_data:
            raise self._refuse(f"a {self._encoding} message with {len(decompressor.unused_data)} bytes after the end "
                               "of its compressed data: send one compressed stream per message")  # fmt: skip
        return payload

    def _refuse(self, details: str) -> _Status:
        """The client's error (INVALID_ARGUMENT), kept so that the handler cannot answer it otherwise."""
        self._refused = _Status(grpc.StatusCode.INVALID_ARGUMENT, details)
        return self._refused

    # ---- running the handler -------------------------------------------------------------------------------------

    async def _run(self) -> None:
        timer = None
        if self.deadline is not None:
            timer = asyncio.get_running_loop().call_at(self.deadline, self._expire)
        try:
            code, details = await self._outcome()
        except asyncio.CancelledError:
            if self.reset:
                return
            if not self._expired:  # neither the client nor its deadline: the server is stopping
                self._finish(grpc.StatusCode.UNAVAILABLE, "the server is shutting down: retry the call")
                raise
            code, details = DEADLINE_EXCEEDED
        finally:
            if timer is not None:
                timer.cancel()
        if self._refused is not None:  # whatever the handler made of the client's error
            code, details = self._refused.code, self._refused.details
        elif self._expired:  # whatever the handler did once cancelled, the deadline ended the call
            code, details = DEADLINE_EXCEEDED
        if not self._ended and not self._messages and not self._buffer and not self.finished:
            # Answered before the client's first message arrived (an unknown method, a refused key, a handler
            # that needs no request): grpc's client fails its own pending send with INTERNAL if the status comes
            # first, so the status waits briefly for the request.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._arrived.wait(), REQUEST_WAIT)
        self._finish(code, details)

    async def _outcome(self) -> tuple[grpc.StatusCode, str]:
        """Run the handler: the status the call ends with (OK, the context's, or the error's)."""
        if self._refused is not None:  # refused at its headers: the handler never runs
            return self._refused.code, self._refused.details
        if self.deadline is not None and self.deadline <= asyncio.get_running_loop().time():
            return DEADLINE_EXCEEDED
        try:
            handler = await self.server.method_handler(self.path, self.metadata)
            if handler is None:
                raise _Status(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")
            self._deserialize = handler.request_deserializer or _identity
            self._streaming_request = handler.stream_unary is not None or handler.stream_stream is not None
            self.stream.may_idle = self._streaming_request and not self._buffer
            self._serialize = handler.response_serializer or _identity
            await self._call(handler)
            return self.context._code or grpc.StatusCode.OK, self.context._details
        except AbortError:
            return self.context._code or grpc.StatusCode.UNKNOWN, self.context._details
        except _Status as status:
            return status.code, status.details
        except asyncio.CancelledError as exc:
            current = asyncio.current_task()
            if current is not None and current.cancelling():  # this call was cancelled: _run says why
                raise
            return self._failed(exc)  # the handler's own: a future it awaited was cancelled
        except Exception as exc:
            return self._failed(exc)

    def _failed(self, exc: BaseException) -> tuple[grpc.StatusCode, str]:
        """A handler's exception: UNKNOWN, logged with its traceback, unless the client's error or the deadline
        (which _run answers) made it."""
        if self._refused is not None or self._expired:
            return grpc.StatusCode.UNKNOWN, ""
        code = self.context._code
        if code is not None and code != grpc.StatusCode.OK:  # set_code, then raise: the code set stands
            return code, self.context._details
        log.error("gRPC %s failed", self.path, exc_info=exc)
        return grpc.StatusCode.UNKNOWN, f"Unexpected {type(exc)}: {exc}"

    async def _call(self, handler: grpc.RpcMethodHandler) -> None:
        context = self.context
        if handler.unary_unary is not None:
            await self.send_message(await _maybe_await(handler.unary_unary(await self._only_request(), context)))
        elif handler.unary_stream is not None:
            await self._send_all(handler.unary_stream(await self._only_request(), context))
        elif handler.stream_unary is not None:
            await self.send_message(await _maybe_await(handler.stream_unary(self._requests(), context)))
        else:
            await self._send_all(handler.stream_stream(self._requests(), context))

    async def _send_all(self, responses: Any) -> None:
        if inspect.isawaitable(responses):  # a coroutine that answers through context.write
            await responses
        elif hasattr(responses, "__aiter__"):
            async for response in responses:
                await self.send_message(response)
        else:
            for response in responses:
                await self.send_message(response)

    def _expire(self) -> None:
        if self._task is not None and not self.finished:
            self._expired = True
            self._task.cancel()

    # ---- the answer ----------------------------------------------------------------------------------------------

    def send_headers(self, metadata: list[tuple[str, str | bytes]] | None = None) -> None:
        if self._headers_sent:
            return
        self._headers_sent = True
        self.connection.send_headers(self.stream, _RESPONSE_HEADERS + _wire_metadata(metadata or ()))

    async def send_message(self, message: Any) -> None:
        if message is None:  # a handler that aborted through set_code without raising returns None
            return
        assert self._serialize is not None
        payload = self._serialize(message)
        if len(payload) > self.server.max_send_message_length:
            raise _Status(grpc.StatusCode.RESOURCE_EXHAUSTED, f"Sent message larger than max "
                          f"({len(payload)} vs. {self.server.max_send_message_length})")  # fmt: skip
        self.send_headers()
        self.connection.send_data(self.stream, b"\x00" + len(payload).to_bytes(4, "big") + payload)
        await self.connection.drained(self.stream)

    def _finish(self, code: grpc.StatusCode, details: str) -> None:
        if self.finished or self.reset:
            return
        self.finished = True
        if self._queued or self._buffer:  # what the handler left unread: dropped, and off the connection's budget
            self._messages.clear()
            self._buffer.clear()
            self._queued = 0
            self.connection.buffered(self.stream, 0)
        trailers = [("grpc-status", str(code.value[0]))]
        if details:
            trailers.append(("grpc-message", _percent_encode(details)))
        trailers += _wire_metadata(self.context._trailing)
        if self._headers_sent:
            self.connection.send_trailers(self.stream, trailers)
        else:  # trailers-only: one header block ends the call
            self.connection.send_headers(self.stream, _RESPONSE_HEADERS + trailers, end_stream=True)

    def _fail_early(self, code: grpc.StatusCode, details: str) -> None:
        """Answer now from the protocol side (the request broke a limit) and stop the handler."""
        self._finish(code, details)
        if self._task is not None:
            self._task.cancel()


class _Status(Exception):
    def __init__(self, code: grpc.StatusCode, details: str) -> None:
        super().__init__(details)
        self.code, self.details = code, details


def _identity(data: Any) -> Any:
    return data


async def _maybe_await(value: Awaitable[Any] | Any) -> Any:
    return await value if inspect.isawaitable(value) else value


def _timeout(value: str) -> float:
    """grpc-timeout, 1 to 8 ASCII digits and a unit (H, M, S, m, u, n), in seconds; INVALID_ARGUMENT otherwise."""
    unit = _TIMEOUT_UNITS.get(value[-1:])
    digits = value[:-1]
    if unit is None or not 1 <= len(digits) <= 8 or not (digits.isascii() and digits.isdigit()):
        raise _Status(grpc.StatusCode.INVALID_ARGUMENT, f"grpc-timeout {value[:20]!r} is malformed: send 1 to 8 "
                      "ASCII digits and a unit, one of H M S m u n (e.g. 200m)")  # fmt: skip
    return int(digits) * unit


def _shortened(exc: BaseException, limit: int = 200) -> str:
    text = str(exc) or type(exc).__name__
    return text if len(text) <= limit else text[:limit] + "..."


def _binary(value: str) -> bytes:
    """A `-bin` metadata value: base64, padded or not; a value that is not base64 stays its own bytes."""
    raw = value.encode("latin-1")
    try:
        return base64.b64decode(raw + b"=" * (-len(raw) % 4), validate=True)
    except binascii.Error:
        return raw


def _wire_metadata(metadata: Iterable[tuple[str, str | bytes]]) -> list[tuple[str, str]]:
    out = []
    for key, value in metadata:
        if isinstance(value, bytes):
            out.append((key.lower(), base64.b64encode(value).decode().rstrip("=")))
        else:
            out.append((key.lower(), value))
    return out


def _percent_encode(details: str) -> str:
    """grpc-message's encoding: UTF-8, then every byte outside 0x20-0x7E and "%" as %XX."""
    return urllib.parse.quote(details, safe=" !\"#$&'()*+,-./:;<=>?@[\\]^_`{|}~")
