"""The fault run of bench/fault_run.py, shortened (8 clients, 2 s a phase, ~20 s in all): a worker killed with
SIGKILL under load, the queue overflowing, the server stopped with SIGTERM under load. No request hangs and none
is lost; each fault leaves the server healthy (a new worker, the queue drained) or exited cleanly."""

from __future__ import annotations

from pathlib import Path

from bench.fault_run import run


def test_no_request_hangs_or_is_lost_when_the_server_is_hurt(tmp_path: Path) -> None:
    kill, overflow, sigterm = run(clients=8, seconds=2.0, base=tmp_path)
    for phase in (kill, overflow, sigterm):
        tally = phase.tally
        assert (tally.hung, tally.lost) == (0, 0), f"{phase.name}: {phase.note}"
        assert tally.sent == tally.answered + sum(tally.errored.values()), phase.name
        assert phase.healthy_after, f"{phase.name}: {phase.note}"
        assert tally.answered > 0, phase.name
    assert kill.exit_code == 0 and overflow.exit_code == 0 and sigterm.exit_code == 0
    assert overflow.tally.errored["HTTP 503"] > 0, "the queue never overflowed"
    assert set(overflow.tally.errored) == {"HTTP 503"}, overflow.tally.errored
    told = [kind for kind in sigterm.tally.errored if not kind.startswith("connection ") and kind != "HTTP 503"]
    assert told == [], sigterm.tally.errored  # refused, reset or 503 while draining: never a 500
