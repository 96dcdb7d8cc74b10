"""The REST listener's header clock (connection_limits.py) at the protocol level, with a transport that records:
it runs from a connection's opening and from the first byte of each later request, and a request whose headers
arrive whole costs no timer (the per-request work the event loop does, bench/RESULTS.md)."""

from __future__ import annotations

import asyncio
from typing import Any

import uvicorn
from uvicorn.server import ServerState

from serve.frontends.http.connection_limits import ConnectionLimits, limited_http_protocol
from tests.unit.frontends.test_exchange import JSON, Transport, _answer

REQUEST = b"POST /predictions/m HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"


class CountingLoop:
    """The running loop, counting call_later."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop, self.timers = loop, 0

    def call_later(self, *args: Any, **kwargs: Any) -> asyncio.TimerHandle:
        self.timers += 1
        return self._loop.call_later(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loop, name)


async def _protocol(limits: ConnectionLimits) -> tuple[Any, Transport]:
    config = uvicorn.Config(_answer(200, JSON, b"[1.0]"), log_config=None, lifespan="off", timeout_keep_alive=30)
    protocol = limited_http_protocol(limits)(config=config, server_state=ServerState(), app_state={})
    transport = Transport()
    protocol.connection_made(transport)
    return protocol, transport


async def _answered(protocol: Any, transport: Transport, count: int) -> None:
    for _ in range(200):
        if len(transport.writes) >= count:
            return
        await asyncio.sleep(0)
    raise AssertionError(f"{len(transport.writes)} answers, {count} expected")


def test_a_request_whose_headers_arrive_whole_arms_no_header_timer():
    async def main() -> int:
        protocol, transport = await _protocol(ConnectionLimits())
        protocol.data_received(REQUEST)
        await _answered(protocol, transport, 1)
        protocol.loop = CountingLoop(protocol.loop)
        for n in range(2, 7):
            protocol.data_received(REQUEST)
            await _answered(protocol, transport, n)
        protocol.connection_lost(None)
        return protocol.loop.timers

    assert asyncio.run(asyncio.wait_for(main(), 10)) == 5  # uvicorn's keep-alive timer after each answer, no other


def test_the_header_clock_runs_from_the_first_byte_of_a_later_request():
    async def main() -> bytes:
        protocol, transport = await _protocol(ConnectionLimits(header_read_timeout=0.2))
        protocol.data_received(REQUEST)
        await _answered(protocol, transport, 1)
        protocol.data_received(b"POST /predictions/m HTTP/1.1\r\nHost: x\r\nx-slow: ")  # and nothing more
        for _ in range(500):  # 408 after 0.2 s; bounded at 10 s however slow the machine
            if transport.closed:
                break
            await asyncio.sleep(0.02)
        protocol.connection_lost(None)
        return transport.writes[-1]

    assert asyncio.run(asyncio.wait_for(main(), 30)).startswith(b"HTTP/1.1 408 ")


def test_past_max_idle_connections_one_never_answered_goes_before_an_idle_keep_alive_client():
    """The client idles between requests since before the newcomers connected; still the newcomer that never
    sent anything is closed, not the client."""

    async def main() -> tuple[bool, bool, bool]:
        config = uvicorn.Config(_answer(200, JSON, b"[1.0]"), log_config=None, lifespan="off", timeout_keep_alive=30)
        listener = limited_http_protocol(ConnectionLimits(max_idle_connections=2))

        def connect() -> tuple[Any, Transport]:
            protocol = listener(config=config, server_state=ServerState(), app_state={})
            transport = Transport()
            protocol.connection_made(transport)
            return protocol, transport

        client, client_transport = connect()
        client.data_received(REQUEST)
        await _answered(client, client_transport, 1)  # idle between requests from now on
        _, hoarder = connect()
        _, newest = connect()  # three waiting against two: the hoarder goes
        return client_transport.closed, hoarder.closed, newest.closed

    assert asyncio.run(asyncio.wait_for(main(), 10)) == (False, True, False)
