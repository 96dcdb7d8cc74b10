"""Hostile HTTP/2 clients against a real `serve` process (issue 24 items 1-3): each attack of bench/http2_attacks.py,
smaller, with REST `/ping` and a gRPC `Ping` probing on other connections throughout, and the server's RSS.

Each attack must be cut off the way the RFC and the issue say (FLOW_CONTROL_ERROR for DATA past a window,
ENHANCE_YOUR_CALM for frames that do no work, the header timeout for a trickled header block, eviction past
max_connections), must not grow the server past a bound, and must not hurt the probes: every probe answered, half
of them within a second (a median, so a loaded CI machine's single slow answer does not fail it). The last two
cases lower the server's RLIMIT_NOFILE: the default max_connections keeps room for the probes, and a server past
its descriptors (a max_connections set too high) answers again once the connections go.
"""

from __future__ import annotations

import asyncio
import statistics
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench import http2_attacks as attacks
from bench.serve_process import ServeProcess
from tests.integration.server import ServerProcess, lin_archive

MiB = 1 << 20


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("hostile_http2")
    store = base / "store"
    store.mkdir()
    lin_archive(base / "lin", store)
    return store


@pytest.fixture(scope="module")
def server(store: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    flags = ("--ncs", "--disable-token-auth", "--models", "lin=lin.mar")
    proc = ServerProcess(tmp_path_factory.mktemp("run"), store, *flags, max_connections=60, header_read_timeout=2,
                         max_idle_connections=40).start()  # fmt: skip
    yield proc
    proc.stop()


def _attacked(server: Any, attack: Any) -> tuple[Any, attacks.Probe, attacks.RssSampler, int]:
    """Run `attack(host, grpc_port)` with the probes and the RSS sampler: (its result, the probe, the sampler, the
    RSS 3 s after)."""
    pid = server.proc.pid
    grpc = f"127.0.0.1:{server.ports['grpc_inference']}"
    grpc_port = server.ports["grpc_inference"]
    with attacks.RssSampler(pid) as sampler, attacks.Probe(server.ports["inference"], grpc) as probe:
        time.sleep(0.3)
        result = asyncio.run(attack("127.0.0.1", grpc_port))
        time.sleep(3.0)
    return result, probe, sampler, attacks.rss(pid)


def _unhurt(probe: attacks.Probe) -> None:
    for kind in ("rest", "grpc"):
        assert not probe.errors[kind], f"{kind} probes failed: {probe.errors[kind][:3]}"
        assert probe.latencies[kind], f"no {kind} probe ran"
        assert statistics.median(probe.latencies[kind]) < 1.0, probe.summary()


def test_data_past_the_windows_is_cut_off_and_memory_returned(server: ServerProcess) -> None:
    before = attacks.rss(server.proc.pid)  # type: ignore[union-attr]
    outcome, probe, sampler, after = _attacked(server, lambda host, port: attacks.window_flood(host, port, seconds=5))
    assert outcome.closed_by_server == 1 and outcome.goaway_codes == [0x3], outcome.summary()  # FLOW_CONTROL_ERROR
    assert sampler.peak - before < 150 * MiB, f"{(sampler.peak - before) / MiB:.0f} MiB for one connection"
    assert after - before < 40 * MiB, f"{(after - before) / MiB:.0f} MiB kept after the connection closed"
    _unhurt(probe)


@pytest.mark.parametrize("kind", attacks.IDLE_KINDS)
def test_a_flood_of_frames_that_do_no_work_is_cut_off(server: ServerProcess, kind: str) -> None:
    before = attacks.rss(server.proc.pid)  # type: ignore[union-attr]
    outcome, probe, sampler, _ = _attacked(server, lambda host, port: attacks.idle_flood(host, port, kind, seconds=5))
    assert outcome.closed_by_server == 1, outcome.summary()
    assert sampler.peak - before < 50 * MiB
    _unhurt(probe)


def test_connections_hoarding_unfinished_requests_are_evicted(server: ServerProcess) -> None:
    outcome, probe, _, _ = _attacked(server, lambda host, port: attacks.hoard(host, port, 80, seconds=4))
    assert outcome.closed_by_server >= 20, outcome.summary()  # 80 hoarders against max_connections 60
    _unhurt(probe)


def test_a_trickled_header_block_is_closed_by_the_header_timeout(server: ServerProcess) -> None:
    outcome, probe, _, _ = _attacked(server, lambda host, port: attacks.header_trickle(host, port, 5, seconds=8))
    assert outcome.closed_by_server == 5 and set(outcome.goaway_codes) == {0}, outcome.summary()
    _unhurt(probe)


def test_a_burst_of_idle_connections_keeps_at_most_max_idle_connections(server: ServerProcess) -> None:
    result, probe, _, _ = _attacked(server, lambda host, port: attacks.idle_burst(host, port, 200))
    _, still_open = result
    assert still_open <= 40, f"{still_open} idle connections left open against max_idle_connections 40"
    _unhurt(probe)


def _low_fd_server(store: Path, workdir: Path, **properties: Any) -> ServeProcess:
    return ServeProcess(workdir, store, "lin=lin.mar", nofile=128, **properties)


def test_the_default_max_connections_leaves_room_for_the_probes(store: Path, tmp_path: Path) -> None:
    server = _low_fd_server(store, tmp_path / "run")
    try:
        outcome, probe, _, _ = _attacked(server, lambda host, port: attacks.hoard(host, port, 150, seconds=4))
        assert outcome.closed_by_server > 0, outcome.summary()  # 150 against 128 descriptors: some were evicted
        _unhurt(probe)
    finally:
        assert server.stop() == 0


def test_the_server_answers_again_after_running_out_of_descriptors(store: Path, tmp_path: Path) -> None:
    server = _low_fd_server(store, tmp_path / "run", max_connections=1000)  # too high: EMFILE is reached

    async def hold(host: str, port: int) -> None:
        await attacks.hoard(host, port, 150, seconds=3)

    try:
        _attacked(server, hold)  # the probes may fail while the descriptors are gone: not asserted
        with attacks.Probe(server.ports["inference"], f"127.0.0.1:{server.ports['grpc_inference']}") as probe:
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and not (probe.latencies["rest"] and probe.latencies["grpc"]):
                time.sleep(0.1)
        assert probe.latencies["rest"] and probe.latencies["grpc"], probe.summary()
    finally:
        assert server.stop() == 0
