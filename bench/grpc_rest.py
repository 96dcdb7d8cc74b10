"""gRPC against REST on one server: the MLP of bench/server.py at concurrency 32, the same load generator for both.

    .venv/bin/python bench/grpc_rest.py            # prints a table
    .venv/bin/python bench/grpc_rest.py --write    # and replaces the gRPC table in bench/RESULTS.md
    .venv/bin/python bench/grpc_rest.py --grpc-server serve-h2   # serve's gRPC on bench/h2_connection.py (h2)

wrk speaks no gRPC, so both protocols are driven by one asyncio Python client in this process: for REST a minimal
keep-alive HTTP/1.1 client on asyncio streams (httpx costs ~10x more per request and would measure itself), for
gRPC grpc.aio with TorchServe's `Predictions` rpc. 32 requests in flight, `--seconds` per block, blocks
alternated REST, gRPC, REST, gRPC and the median block quoted. The client takes CPU from the server on the
same 2 cores, so the absolute figures are below wrk's (bench/server.py); the ratio is the point. The model is
registered with batch_size 8, max_batch_delay 5 ms, 1 worker, as in bench/server.py.

Each block also records the CPU time per request of the server (its process and its workers, from /proc) and of
this client (getrusage). On a machine other processes load, throughput favours the protocol with more threads
(gRPC's core and poller threads win more of the scheduler's time slices), so the CPU per request is the figure
that holds: on an otherwise idle machine throughput is about 2 cores / (server + client CPU per request).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import resource
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import grpc
import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
from h2_client import GrpcClient  # noqa: E402
from server import OUT, build_archives, register, serving, write_payloads  # noqa: E402

from serve.frontends.grpc.generated import inference_pb2 as ipb  # noqa: E402
from serve.frontends.grpc.generated import inference_pb2_grpc as ipb_grpc  # noqa: E402

RESULTS = ROOT / "bench" / "RESULTS.md"
BEGIN, END = "<!-- grpc:begin -->", "<!-- grpc:end -->"
CONCURRENCY = 32


def _tree_cpu(pid: int) -> float:
    """CPU seconds (user + system) of process `pid` and its live descendants (its workers)."""
    stats: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        try:
            stats[int(entry.name)] = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except (ValueError, OSError):  # not a process, or it ended meanwhile
            continue
    tree, total = {pid}, 0.0
    for child in sorted(stats):  # a child's pid is above its parent's unless the pid numbers wrapped
        if int(stats[child][1]) in tree:
            tree.add(child)
    for member in tree & stats.keys():
        total += (int(stats[member][11]) + int(stats[member][12])) / os.sysconf("SC_CLK_TCK")
    return total


def _own_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _measured(call: Callable[[], Awaitable[None]], seconds: float, server: int) -> tuple[float, ...]:
    """_drive's (req/s, p50 ms) and the server's and this client's CPU milliseconds per request."""
    server_cpu, client_cpu, start = _tree_cpu(server), _own_cpu(), time.monotonic()
    rate, p50 = await _drive(call, seconds)
    count = rate * (time.monotonic() - start)
    server_ms = (_tree_cpu(server) - server_cpu) / count * 1e3
    return rate, p50, server_ms, (_own_cpu() - client_cpu) / count * 1e3


async def _drive(call: Callable[[], Awaitable[None]], seconds: float) -> tuple[float, float]:
    """(requests per second, median latency ms) of CONCURRENCY loops calling `call` for `seconds`."""
    latencies: list[float] = []
    deadline = time.monotonic() + seconds

    async def loop() -> None:
        while time.monotonic() < deadline:
            start = time.perf_counter()
            await call()
            latencies.append((time.perf_counter() - start) * 1e3)

    start = time.monotonic()
    await asyncio.gather(*(loop() for _ in range(CONCURRENCY)))
    return len(latencies) / (time.monotonic() - start), statistics.median(latencies)


class _Connection:
    """One keep-alive HTTP/1.1 connection posting the same body; a pool of them serves the REST loops."""

    def __init__(self, host: str, port: int, path: str, body: bytes) -> None:
        self.address, self.body = (host, port), body
        self.head = (f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n").encode()  # fmt: skip
        self.streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def post(self) -> None:
        if self.streams is None:
            self.streams = await asyncio.open_connection(*self.address)
        reader, writer = self.streams
        writer.write(self.head + self.body)
        status = await reader.readline()
        if not status:  # the server closed it while idle (uvicorn's keep-alive timeout): reconnect once
            self.streams = None
            await self.post()
            return
        length = 0
        while (line := await reader.readline()) not in (b"\r\n", b""):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":")[1])
        await reader.readexactly(length)
        if b" 200 " not in status:
            raise RuntimeError(f"REST answered {status!r}")


async def measure(rest_url: str, grpc_target: str, body: bytes, seconds: float, rounds: int,
                  server: int) -> dict[str, list]:  # fmt: skip
    results: dict[str, list] = {"REST": [], "gRPC": [], "gRPC-aio": []}
    url = httpx.URL(rest_url)
    pool: asyncio.Queue[_Connection] = asyncio.Queue()
    for _ in range(CONCURRENCY):
        pool.put_nowait(_Connection(url.host, url.port or 80, url.path, body))
    host, port = grpc_target.rsplit(":", 1)
    client = await GrpcClient.connect(host, int(port))
    async with grpc.aio.insecure_channel(grpc_target) as ch:
        stub = ipb_grpc.InferenceAPIsServiceStub(ch)
        request = ipb.PredictionsRequest(model_name="mlp", input={"data": body})
        serialized = request.SerializeToString()

        async def rest() -> None:
            connection = await pool.get()
            try:
                await connection.post()
            finally:
                pool.put_nowait(connection)

        async def rpc() -> None:
            await client.unary("/org.pytorch.serve.grpc.inference.InferenceAPIsService/Predictions", serialized)

        async def aio_rpc() -> None:
            await stub.Predictions(request, timeout=30)

        await _drive(rest, 2)
        await _drive(rpc, 2)  # warm-up
        await _drive(aio_rpc, 2)
        for _ in range(rounds):
            results["REST"].append(await _measured(rest, seconds, server))
            results["gRPC"].append(await _measured(rpc, seconds, server))
            results["gRPC-aio"].append(await _measured(aio_rpc, seconds, server))
    client.close()
    return results


def run(seconds: float, rounds: int, implementation: str) -> dict[str, list]:
    """`implementation`: serve's grpc_server, or serve-h2: serve's native server on H2Connection (bench/serve_h2.py)."""
    store, payloads = OUT / "store", OUT / "payloads"
    build_archives(store)
    write_payloads(payloads)
    program = [sys.executable, str(ROOT / "bench" / "serve_h2.py")] if implementation == "serve-h2" else None
    grpc_server = "serve" if implementation == "serve-h2" else implementation
    with serving(store, "grpc_server", [f"grpc_server={grpc_server}"], program) as (ports, process):
        register(ports, "mlp")
        body = (payloads / "mlp.json").read_bytes()
        rest_url = f"http://127.0.0.1:{ports['inference']}/predictions/mlp"
        target = f"127.0.0.1:{ports['grpc_inference']}"
        return asyncio.run(measure(rest_url, target, body, seconds, rounds, process.pid))


def table(results: dict[str, list], command: str, seconds: float, server: str) -> str:
    def median(protocol: str, column: int) -> float:
        return statistics.median(block[column] for block in results[protocol])

    rows = [f"| {label} | {median(p, 0):.0f} | {median(p, 1):.2f} | {median(p, 2):.3f} | {median(p, 3):.3f} |"
            for label, p in (("REST `/predictions/mlp`, bare HTTP/1.1 client", "REST"),
                             ("gRPC `Predictions`, bare HTTP/2 client", "gRPC"),
                             ("gRPC `Predictions`, grpc.aio client", "gRPC-aio"))]  # fmt: skip
    lines = [
        f"`{command}` on {datetime.date.today().isoformat()}: MLP 64-128-10, JSON body, {CONCURRENCY} requests in "
        f"flight from one asyncio Python process in the same machine, {len(results['REST'])} alternated blocks of "
        f"{seconds:g} s per protocol, median block; CPU per request from /proc (server and its workers) and "
        "getrusage (client).",
        "",
        "| protocol | req/s | p50 ms | server CPU ms/req | client CPU ms/req |",
        "|---|---:|---:|---:|---:|",
        *rows,
        "",
        f"gRPC / REST throughput, bare clients: {median('gRPC', 0) / median('REST', 0):.2f}, gRPC through grpc.aio's "
        f"client: {median('gRPC-aio', 0) / median('REST', 0):.2f}; server CPU per request, REST / gRPC: "
        f"{median('REST', 2) / median('gRPC', 2):.2f} (above 1: gRPC cheaper); server `grpc_server={server}`.",
    ]
    return "\n".join(lines)


def main() -> None:
    global CONCURRENCY
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=float, default=8.0, help="length of one block")
    parser.add_argument("--rounds", type=int, default=3, help="blocks per protocol")
    parser.add_argument("--grpc-server", default="serve", choices=("serve", "grpcio", "serve-h2"),
                        help="the server's grpc_server: serve's own HTTP/2 server or grpc.aio; serve-h2: serve's "
                             "server on the h2-based connection of bench/h2_connection.py")  # fmt: skip
    parser.add_argument("--write", action="store_true", help="replace the gRPC table in bench/RESULTS.md")
    parser.add_argument("--concurrency", type=int, default=CONCURRENCY, help="requests in flight")
    args = parser.parse_args()
    CONCURRENCY = args.concurrency
    results = run(args.seconds, args.rounds, args.grpc_server)
    text = table(results, "python bench/grpc_rest.py " + " ".join(sys.argv[1:]), args.seconds, args.grpc_server)
    print(text)
    if args.write:
        old = RESULTS.read_text()
        if BEGIN not in old:
            old += f"\n## gRPC against REST (issue: gRPC and the Open Inference Protocol)\n\n{BEGIN}\n{END}\n"
        head, _, rest = old.partition(BEGIN)
        RESULTS.write_text(f"{head}{BEGIN}\n{text}\n{END}{rest.partition(END)[2]}")


if __name__ == "__main__":
    main()
