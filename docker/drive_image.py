"""Run serve's image with podman and drive it as a user would; exit non-zero on any failure.

    .venv/bin/python docker/drive_image.py --image localhost/serve:local --model-store build/image/model_store

docker/build_local.sh runs this after building the image; it needs the host's .venv (grpcio, and serve itself for
the reference answers) and a model store made by examples/build_model_store.py (digits, minilm, tinychat, resnet18).

Decisions:
- The container runs exactly as the README says (`podman run IMAGE --disable-token-auth`, the store mounted
  read-only at /home/model-server/model-store): the image's ENTRYPOINT, config.properties and user are under test.
  Its five ports are published on 127.0.0.1 to free host ports (bridge network); `--network host` is the fallback
  for a sandbox where podman cannot set up a bridge (NETWORK=host), and then the listeners are moved to free ports
  through the TS_* variables the image's config enables, so that other servers on this machine never collide.
- Cold start is wall time from `podman run` to the first `/ping` 200 (the server answers 200 once the startup
  models are loaded), polled every 50 ms: it includes podman creating the container. Measured with the four
  example models (the drive's own start) and, median of DIGITS_RUNS fresh containers, with digits alone (what the
  container and the server cost, little of it model loading).
- The answers are checked against references, not just status codes: digits' sample is a held-out 7; the minilm
  embedding equals the one this checkout computes in process from the same archive (load_from_archive); tinychat
  counts to four as tests/integration/test_text_generation.py pins; resnet18 answers 1000 finite logits; gRPC's
  Predictions equals REST's answer for digits, and grpc.health.v1 says SERVING.
- SIGTERM is sent with `podman kill --signal TERM` (not `podman stop`, which would SIGKILL after its timeout and hide
  a hang) and the container must exit 0 on its own within STOP_SECONDS.
- Every wait is bounded (START_SECONDS, STOP_SECONDS); the container is removed in every case.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

PORTS = {"inference": 8080, "management": 8081, "metrics": 8082, "grpc_inference": 7070, "grpc_management": 7071}
STORE = "/home/model-server/model-store"
START_SECONDS = 600  # bounds, not targets: the machine may be loaded
STOP_SECONDS = 120
DIGITS_RUNS = 3
HTTP_SECONDS = 120


def podman(args: list[str], timeout: float = 120, check: bool = True) -> subprocess.CompletedProcess[str]:
    cmd = ["podman", *os.environ.get("PODMAN_FLAGS", "").split(), *args]
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if check and result.returncode != 0:
        raise SystemExit(f"drive_image: {' '.join(cmd)} failed ({result.returncode}):\n{result.stderr[-3000:]}")
    return result


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def http(url: str, body: bytes | None = None, content_type: str = "application/json") -> tuple[int, bytes]:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": content_type} if body else {})
    try:
        with urllib.request.urlopen(request, timeout=HTTP_SECONDS) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def check(condition: bool, what: str) -> None:
    if not condition:
        raise AssertionError(what)
    print(f"  ok  {what}")


def run_container(image: str, store: Path, name: str, network: str, *cmd: str) -> dict[str, int]:
    host = {kind: free_port() for kind in PORTS}
    args = ["run", "-d", *os.environ.get("PODMAN_RUN_FLAGS", "").split(), "--name", name]
    args += ["-v", f"{store.resolve()}:{STORE}:ro"]
    if network == "host":
        args += ["--network", "host"]
        for kind, port in host.items():
            if kind.startswith("grpc_"):
                args += ["-e", f"TS_{kind.upper()}_PORT={port}", "-e", f"TS_{kind.upper()}_ADDRESS=127.0.0.1"]
            else:
                args += ["-e", f"TS_{kind.upper()}_ADDRESS=http://127.0.0.1:{port}"]
    else:
        for kind, port in host.items():
            args += ["-p", f"127.0.0.1:{port}:{PORTS[kind]}"]
    podman([*args, image, "--disable-token-auth", *cmd])
    return host


def running(name: str) -> bool:
    state = podman(["inspect", "--format", "{{.State.Running}}", name], check=False)
    return state.stdout.strip() == "true"


def wait_for_ping(name: str, base: str) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if not running(name):
            raise AssertionError(f"the container exited before /ping answered 200:\n{logs(name)}")
        try:
            with urllib.request.urlopen(base + "/ping", timeout=5) as r:
                if r.status == 200:
                    return
        except (urllib.error.URLError, ConnectionError, OSError):
            pass
        time.sleep(0.05)
    raise AssertionError(f"no /ping 200 within {START_SECONDS} s:\n{logs(name)}")


def logs(name: str) -> str:
    result = podman(["logs", "--tail", "60", name], check=False)
    return (result.stdout + result.stderr)[-6000:]


def drive_http(base: str, metrics: str, store: Path) -> bytes:
    """The example models over REST; returns the digits answer (the gRPC reference)."""
    sample = (ROOT / "examples" / "digits" / "sample.png").read_bytes()  # a held-out 7
    status, digits = http(base + "/predictions/digits", sample, "image/png")
    scores = json.loads(digits)
    check(status == 200 and max(scores, key=scores.get) == "7", f"digits: the held-out sample is a 7 ({scores})")

    import numpy as np

    from serve.archive import open_archive
    from serve.worker import load_from_archive

    text = b"A model server in the TorchServe mould."
    status, body = http(base + "/predictions/minilm", text, "text/plain")
    embedding = np.asarray(json.loads(body), dtype=np.float64)
    with open_archive(store / "minilm.mar") as archive:  # the same archive, in this checkout's process
        handler, context = load_from_archive(archive)
        context.begin_batch({0: "r0"}, [{}])
        (reference,) = handler.handle([{"body": text}], context)
    error = float(np.abs(embedding - np.asarray(reference)).max()) if embedding.shape == (384,) else float("inf")
    check(status == 200 and error < 1e-4, f"minilm: the 384-d embedding equals the checkout's (max |diff| {error:.1e})")

    chat = {"model": "tinychat", "messages": [{"role": "user", "content": "Count to 4."}], "temperature": 0}
    status, body = http(base + "/v1/chat/completions", json.dumps(chat).encode())
    answer = json.loads(body)["choices"][0]["message"]["content"] if status == 200 else body.decode()
    check(answer == "One, two, three, four.", f"tinychat: /v1/chat/completions counts to four ({answer!r})")

    image = json.dumps(np.zeros((3, 224, 224)).tolist()).encode()
    status, body = http(base + "/predictions/resnet18", image)
    logits = np.asarray(json.loads(body)) if status == 200 else np.zeros(0)
    check(logits.shape == (1000,) and bool(np.isfinite(logits).all()), "resnet18: 1000 finite logits")

    status, body = http(metrics + "/metrics")
    check(status == 200 and b"ts_inference_requests" in body, "metrics: /metrics answers Prometheus text")
    return digits


def drive_grpc(port: int, digits_rest: bytes) -> None:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from serve.frontends.grpc.generated import inference_pb2 as ipb
    from serve.frontends.grpc.generated import inference_pb2_grpc as ipb_grpc

    sample = (ROOT / "examples" / "digits" / "sample.png").read_bytes()
    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        health = health_pb2_grpc.HealthStub(channel).Check(health_pb2.HealthCheckRequest(), timeout=HTTP_SECONDS)
        check(health.status == health_pb2.HealthCheckResponse.SERVING, "gRPC: grpc.health.v1 Check is SERVING")
        request = ipb.PredictionsRequest(model_name="digits", input={"data": sample})
        reply = ipb_grpc.InferenceAPIsServiceStub(channel).Predictions(request, timeout=HTTP_SECONDS)
    same = json.loads(reply.prediction) == json.loads(digits_rest)
    check(same, "gRPC: Predictions on digits answers what REST answers")


def stop(name: str) -> tuple[int, float]:
    start = time.monotonic()
    podman(["kill", "--signal", "TERM", name])
    waited = podman(["wait", name], timeout=STOP_SECONDS, check=False)
    seconds = time.monotonic() - start
    if waited.returncode != 0:
        raise AssertionError(f"podman wait failed: {waited.stderr}")
    return int(waited.stdout.strip().splitlines()[-1]), seconds


def digits_cold_starts(args: argparse.Namespace) -> tuple[list[float], list[float]]:
    """Fresh containers serving digits alone: (podman run -d returned, /ping 200) seconds after podman run was
    called, each container stopped by SIGTERM (exit 0)."""
    up, times = [], []
    for i in range(DIGITS_RUNS):
        name = f"{args.name}-digits{i}"
        start = time.monotonic()
        ports = run_container(args.image, args.model_store, name, args.network, "--models", "digits=digits.mar")
        up.append(time.monotonic() - start)
        try:
            wait_for_ping(name, f"http://127.0.0.1:{ports['inference']}")
            times.append(time.monotonic() - start)
            code, _ = stop(name)
            if code != 0:
                raise AssertionError(f"digits-only container exited {code}:\n{logs(name)}")
        finally:
            podman(["rm", "--force", "--ignore", name], check=False)
    return up, times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--image", default="localhost/serve:local")
    parser.add_argument("--model-store", type=Path, required=True, help="the examples' archives")
    parser.add_argument("--network", choices=["bridge", "host"], default=os.environ.get("NETWORK", "bridge"))
    parser.add_argument("--name", default=f"serve-image-check-{os.getpid()}")
    args = parser.parse_args(argv)

    podman(["rm", "--force", "--ignore", args.name])
    start = time.monotonic()
    ports = run_container(args.image, args.model_store, args.name, args.network)
    stopped = False
    try:
        base = f"http://127.0.0.1:{ports['inference']}"
        wait_for_ping(args.name, base)
        cold = time.monotonic() - start
        print(f"cold start, the four example models (podman run to /ping 200): {cold:.2f} s")
        health = podman(["healthcheck", "run", args.name], check=False)
        if "not supported" in health.stderr or "no healthcheck" in health.stderr:
            print(f"  --  HEALTHCHECK not run: {health.stderr.strip()}")
        else:
            check(health.returncode == 0, "the image's HEALTHCHECK passes (podman healthcheck run)")
        digits = drive_http(base, f"http://127.0.0.1:{ports['metrics']}", args.model_store)
        drive_grpc(ports["grpc_inference"], digits)
        code, seconds = stop(args.name)
        stopped = True
        check(code == 0, f"SIGTERM: the container exited {code} in {seconds:.1f} s")
        up, digits_only = digits_cold_starts(args)
        median = sorted(digits_only)[len(digits_only) // 2]
        runs = ", ".join(f"{t:.2f}" for t in digits_only)
        print(f"cold start, digits alone (median of {len(digits_only)}): {median:.2f} s ({runs});"
              f" podman run -d itself returned after {sorted(up)[len(up) // 2]:.2f} s")  # fmt: skip
        figures = {"cold_start_s": round(cold, 2), "cold_start_digits_s": round(median, 2),
                   "stop_s": round(seconds, 2), "exit_code": code}  # fmt: skip
        print(json.dumps(figures))
    except (AssertionError, ValueError, KeyError, TypeError, OSError, subprocess.TimeoutExpired) as e:
        # a wrong answer, an unparsable or missing body, a refused connection, a podman call that hung
        print(f"FAILED: {type(e).__name__}: {e}\n--- container log ---\n{logs(args.name)}", file=sys.stderr)
        return 1
    finally:
        if not stopped:
            podman(["kill", args.name], check=False)
        podman(["rm", "--force", "--ignore", args.name], check=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
