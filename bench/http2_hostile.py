"""The attacks of issue 24 on a real serve's gRPC port, each with probes on other connections and the server's RSS:
what one abusive client costs the server and everyone else (bench/http2_attacks.py has the attacks).

    .venv/bin/python bench/http2_hostile.py                          # serve's own HTTP/2 server, every attack
    .venv/bin/python bench/http2_hostile.py --server grpcio          # the same against grpc_server=grpcio
    .venv/bin/python bench/http2_hostile.py --server serve-h2        # serve's server on bench/h2_connection.py (h2)
    .venv/bin/python bench/http2_hostile.py --attacks window ping --window-connections 12

For each attack: a fresh server process (the lin model, token auth off), a REST `/ping` and a gRPC `Ping` probe
every 0.1 s on their own connections, the server process's RSS sampled every 0.1 s (peak, and 3 s after the
attack's connections closed), and the attack's own outcome (what it sent, whether and how it was cut off). The
issue's figures: the window flood took the server from 96 MB to 1.5 GB (12 connections: 3 GB) and was never cut
off; 1,100 hoarding connections made /ping fail; 17.9 M zero-length CONTINUATIONs in 10 s and 20 M unread PINGs
were never cut off (the PINGs grew the server to 415 MB).
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import http2_attacks as attacks  # noqa: E402
from bench.serve_process import ServeProcess  # noqa: E402

ATTACKS = ["window", *attacks.IDLE_KINDS, "hoard", "trickle", "burst"]


def _attack(name: str, args: argparse.Namespace) -> Callable[[str, int], Awaitable[str]]:
    async def run(host: str, port: int) -> str:
        if name == "window":
            outcomes = await asyncio.gather(*(attacks.window_flood(host, port, seconds=args.seconds)
                                              for _ in range(args.window_connections)))  # fmt: skip
            return " | ".join(o.summary() for o in outcomes[:2]) + (" | ..." if len(outcomes) > 2 else "")
        if name in attacks.IDLE_KINDS:
            return (await attacks.idle_flood(host, port, name, seconds=args.seconds)).summary()
        if name == "hoard":
            return (await attacks.hoard(host, port, args.hoard_connections, seconds=args.seconds)).summary()
        if name == "trickle":
            return (await attacks.header_trickle(host, port, seconds=args.seconds + 5)).summary()
        outcome, still_open = await attacks.idle_burst(host, port, args.burst_connections)
        return f"{outcome.summary()}; {still_open} of them still open after 3 s"

    return run


def _one(name: str, args: argparse.Namespace, store: Path, workdir: Path) -> dict[str, Any]:
    grpc_server = "serve" if args.server == "serve-h2" else args.server
    properties: dict[str, Any] = {"grpc_server": grpc_server, **dict(p.split("=", 1) for p in args.property)}
    program = [sys.executable, str(ROOT / "bench" / "serve_h2.py")] if args.server == "serve-h2" else None
    server = ServeProcess(workdir / name, store, "lin=lin.mar", nofile=args.nofile, program=program, **properties)
    try:
        pid = server.proc.pid
        before = attacks.rss(pid)
        grpc_target = f"127.0.0.1:{server.ports['grpc_inference']}"
        with attacks.RssSampler(pid) as sampler, attacks.Probe(server.ports["inference"], grpc_target) as probe:
            time.sleep(0.3)
            outcome = asyncio.run(_attack(name, args)("127.0.0.1", server.ports["grpc_inference"]))
            time.sleep(3.0)
        return {"attack": name, "rss_before": before, "rss_peak": sampler.peak, "rss_after": attacks.rss(pid),
                "probe": probe.summary(), "outcome": outcome}  # fmt: skip
    finally:
        server.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", default="serve", choices=["serve", "grpcio", "serve-h2"],
                        help="grpc_server; serve-h2: serve's server on bench/h2_connection.py")  # fmt: skip
    parser.add_argument("--attacks", nargs="*", default=ATTACKS, choices=ATTACKS)
    parser.add_argument("--seconds", type=float, default=10.0, help="how long each attack runs at most")
    parser.add_argument("--window-connections", type=int, default=1)
    parser.add_argument("--hoard-connections", type=int, default=1100)
    parser.add_argument("--burst-connections", type=int, default=3000)
    parser.add_argument("--property", action="append", default=[], help="key=value for config.properties")
    parser.add_argument("--nofile", type=int, default=1024, help="the server's RLIMIT_NOFILE (the issue's: 1024)")
    args = parser.parse_args()
    from tests.integration.server import lin_archive

    with tempfile.TemporaryDirectory() as tmp:
        store = Path(tmp) / "store"
        store.mkdir()
        lin_archive(Path(tmp) / "src", store)
        header = f"| attack ({args.server}) | RSS before | peak | 3 s after | probes (REST, gRPC) | the attack |"
        print(header)
        print("|---|---:|---:|---:|---|---|")
        for name in args.attacks:
            row = _one(name, args, store, Path(tmp))
            mb = {k: f"{row[k] / 2**20:.0f} MiB" for k in ("rss_before", "rss_peak", "rss_after")}
            print(f"| {name} | {mb['rss_before']} | {mb['rss_peak']} | {mb['rss_after']} | {row['probe']} | "
                  f"{row['outcome']} |", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
