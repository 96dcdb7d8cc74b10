"""Server CPU per unary rpc of the ways a Python gRPC server can be built, on a bare echo (issue 19 item 5).

    .venv/bin/python bench/grpc_echo.py                       # every variant, 3 alternated blocks of 3 s each
    .venv/bin/python bench/grpc_echo.py --seconds 2 --rounds 5 aio sync-loop
    .venv/bin/python bench/grpc_echo.py --concurrency 1 native native-h2   # one call in flight instead of 32

Each variant is a server in its own process answering one unary rpc `/echo.Echo/Call` with its request bytes (no
servicer code at all), driven by a grpc.aio client process with 32 calls in flight (TorchServe's `Predictions`
request of the MLP's JSON body, ~700 bytes). The figure is the server process's CPU time (/proc, all its threads)
per answered rpc: the per-rpc price of the gRPC machinery itself, which serve's servicers sit on top of.
Variants:
- `native`: serve's own HTTP/2 gRPC server (serve/frontends/grpc/native.py) on uvloop, the same bytes handler
  (what serve runs since the native server);
- `native-pb`: `native` with the protobuf handler of `aio-pb`;
- `native-h2`: `native` on bench/h2_connection.py's H2Connection (python-hyper's h2 state machine, with the same
  protections as serve's connection) instead of serve's own HTTP/2 connection (issue 24 item 10);
- `aio`: grpc.aio on uvloop (what serve runs), a generic handler taking and returning bytes;
- `aio-opts`: the same with `grpc.so_reuseport` 0, `maximum_concurrent_rpcs`, compression off, and grpc's
  `optimization_target=throughput`;
- `aio-poll`: `aio` with GRPC_POLL_STRATEGY=poll (grpc core's poll() poller instead of epoll);
- `aio-pb`: grpc.aio with protobuf (de)serialization of TorchServe's PredictionsRequest / PredictionResponse;
- `sync`: the synchronous `grpc.server` with a ThreadPoolExecutor, answering in the pool thread;
- `sync-loop`: the synchronous server whose handler hands each request to an asyncio (uvloop) loop on another
  thread with `run_coroutine_threadsafe` and waits for its answer, the way it would reach serve's dataplane.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path

import grpc

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
VARIANTS = ["native", "native-pb", "native-h2", "aio", "aio-opts", "aio-pb", "aio-poll", "sync", "sync-loop"]
ENV = {"aio-poll": {"GRPC_POLL_STRATEGY": "poll"}}  # the server process's environment, beside this one's
METHOD = "/echo.Echo/Call"
CONCURRENCY = 32


def _identity(request: bytes, context: object) -> bytes:
    return request


def _cpu(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pb_handler() -> grpc.RpcMethodHandler:
    from serve.frontends.grpc.generated import inference_pb2 as ipb

    async def call(request: object, context: object) -> object:
        return ipb.PredictionResponse(prediction=request.input["data"])  # type: ignore[attr-defined]

    return grpc.unary_unary_rpc_method_handler(
        call, request_deserializer=ipb.PredictionsRequest.FromString,
        response_serializer=ipb.PredictionResponse.SerializeToString)  # fmt: skip


async def _serve_aio(variant: str, port_file: Path) -> None:
    options: list[tuple[str, object]] = [("grpc.so_reuseport", 0)]
    kwargs: dict[str, object] = {}
    if variant == "aio-opts":
        options += [("grpc.optimization_target", "throughput")]
        kwargs = {"maximum_concurrent_rpcs": 1000, "compression": grpc.Compression.NoCompression}

    async def call(request: bytes, context: object) -> bytes:
        return request

    handler = _pb_handler() if variant == "aio-pb" else grpc.unary_unary_rpc_method_handler(call)
    server = grpc.aio.server(options=options, **kwargs)  # type: ignore[arg-type]
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("echo.Echo", {"Call": handler})])
    port_file.write_text(str(server.add_insecure_port("127.0.0.1:0")))
    await server.start()
    await server.wait_for_termination()


def _serve_sync(variant: str, port_file: Path) -> None:
    handler = _identity
    if variant == "sync-loop":
        import uvloop

        loop = uvloop.new_event_loop()
        threading.Thread(target=loop.run_forever, daemon=True).start()

        async def answer(request: bytes) -> bytes:
            return request

        def handler(request: bytes, context: object) -> bytes:
            return asyncio.run_coroutine_threadsafe(answer(request), loop).result()

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=CONCURRENCY),
                         options=[("grpc.so_reuseport", 0)], maximum_concurrent_rpcs=1000)  # fmt: skip
    rpc = grpc.unary_unary_rpc_method_handler(handler)
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("echo.Echo", {"Call": rpc})])
    port_file.write_text(str(server.add_insecure_port("127.0.0.1:0")))
    server.start()
    server.wait_for_termination()


async def _serve_native(variant: str, port_file: Path) -> None:
    from serve.frontends.grpc.native import Server

    async def call(request: bytes, context: object) -> bytes:
        return request

    handler = _pb_handler() if variant == "native-pb" else grpc.unary_unary_rpc_method_handler(call)
    if variant == "native-h2":
        from bench.h2_connection import H2Connection

        server = Server(connection_class=H2Connection)  # type: ignore[arg-type]
    else:
        server = Server()
    server.add_generic_rpc_handlers([grpc.method_handlers_generic_handler("echo.Echo", {"Call": handler})])
    port_file.write_text(str(server.add_insecure_port("127.0.0.1:0")))
    await server.start()
    await server.wait_for_termination()


def serve_variant(variant: str, port_file: Path) -> None:
    if variant.startswith("native"):
        import uvloop

        uvloop.run(_serve_native(variant, port_file))
    elif variant.startswith("aio"):
        import uvloop

        uvloop.run(_serve_aio(variant, port_file))
    else:
        _serve_sync(variant, port_file)


async def _drive(port: int, seconds: float, body: bytes) -> int:
    """Calls answered by CONCURRENCY loops in `seconds`."""
    from serve.frontends.grpc.generated import inference_pb2 as ipb

    request = ipb.PredictionsRequest(model_name="mlp", input={"data": body}).SerializeToString()
    async with grpc.aio.insecure_channel(f"127.0.0.1:{port}") as channel:
        call = channel.unary_unary(METHOD)
        for _ in range(50):
            await call(request)
        done, deadline = 0, time.monotonic() + seconds

        async def loop() -> None:
            nonlocal done
            while time.monotonic() < deadline:
                await call(request, timeout=30)
                done += 1

        await asyncio.gather(*(loop() for _ in range(CONCURRENCY)))
    return done


def block(variant: str, seconds: float, body: bytes) -> tuple[float, float]:
    """(calls/s, server CPU ms per call) of one fresh server of `variant`."""
    with tempfile.TemporaryDirectory() as tmp:
        port_file = Path(tmp) / "port"
        env = dict(os.environ, **ENV.get(variant, {}))
        server = subprocess.Popen([sys.executable, __file__, "--serve", variant, str(port_file)], env=env)
        try:
            while not port_file.exists() or not port_file.read_text():
                if server.poll() is not None:
                    raise RuntimeError(f"the {variant} server exited with {server.returncode}")
                time.sleep(0.05)
            time.sleep(0.5)
            port = int(port_file.read_text())
            asyncio.run(_drive(port, 0.5, body))  # warm-up
            cpu, start = _cpu(server.pid), time.monotonic()
            calls = asyncio.run(_drive(port, seconds, body))
            elapsed, used = time.monotonic() - start, _cpu(server.pid) - cpu
        finally:
            server.kill()
            server.wait()
    return calls / elapsed, used / calls * 1e3


def main() -> None:
    global CONCURRENCY
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("variants", nargs="*", help=f"some of {', '.join(VARIANTS)} (default: all)")
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY, help="calls in flight")
    parser.add_argument("--serve", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    CONCURRENCY = args.concurrency
    if args.serve:
        serve_variant(args.serve[0], Path(args.serve[1]))
        return
    if unknown := set(args.variants) - set(VARIANTS):
        parser.error(f"unknown variant(s) {sorted(unknown)}: choose from {VARIANTS}")
    args.variants = args.variants or VARIANTS
    body = json.dumps([round(0.01 * i, 6) for i in range(64)]).encode()
    results: dict[str, list[tuple[float, float]]] = {v: [] for v in args.variants}
    for _ in range(args.rounds):
        for variant in args.variants:
            results[variant].append(block(variant, args.seconds, body))
            print(f"{variant}: {results[variant][-1][0]:.0f} calls/s, {results[variant][-1][1]:.3f} ms CPU/call",
                  flush=True)  # fmt: skip
    print(
        f"\nload average {os.getloadavg()[0]:.1f}; {CONCURRENCY} in flight; medians of {args.rounds} blocks of "
        f"{args.seconds:g} s:"
    )
    print("| variant | calls/s | server CPU ms/call | range |\n|---|---:|---:|---:|")
    for variant, rows in results.items():
        cpu = [r[1] for r in rows]
        print(f"| {variant} | {statistics.median(r[0] for r in rows):.0f} | {statistics.median(cpu):.3f} | "
              f"{min(cpu):.3f}-{max(cpu):.3f} |")  # fmt: skip


if __name__ == "__main__":
    main()
