"""Deployment footprint: the image's runtime venv against TorchServe's venv + JDK, and cold start.

    .venv/bin/python bench/deploy.py            # prints the table
    .venv/bin/python bench/deploy.py --write    # and replaces the deploy section of bench/RESULTS.md

Size. The runtime venv is built exactly as the image builds it: docker/install.sh makes a wheel of this checkout
and installs it into a fresh venv (bench/out/deploy/venv) with the runtime dependencies only. What is measured is
the apparent size (sum of file sizes, symlinks not followed) of that venv; the Python installation both images
need anyway (the base image's standard library) is reported beside it, not added. TorchServe's side is the anchor's
venv (/tmp/ts-anchor/.venv: torch 2.13.0 CPU, torchserve 0.12.0 and their dependencies) plus the JDK that `java`
resolves to (/usr/lib/jvm/<jdk>), measured the same way. No Docker engine runs here: these are the installed
trees an image would contain, not image sizes.

Cold start: wall time from spawning `serve start --foreground` (the image's entry point, from that venv, with the
image's config.properties and ports moved to free loopback ports through TS_* variables) to the first successful
prediction; the client polls POST /predictions/<model> every 20 ms. Median of 3 fresh processes. Measured on the
digits example (LeNet, --torch-compat) and on the TorchServe anchor's MLP (its models.py, seeded weights); TorchServe
on the same MLP archive of the anchor (`torchserve --start --foreground --models mlp=mlp.mar`, 1 worker).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "bench" / "out" / "deploy"
RESULTS = ROOT / "bench" / "RESULTS.md"
BEGIN, END = "<!-- deploy:begin -->", "<!-- deploy:end -->"
TITLE = "## Deployment footprint (issue: deployment)"
TS_ANCHOR = Path("/tmp/ts-anchor")
ANCHOR_SRC = ROOT.parent / "shared" / "anchors" / "torchserve"
REPEATS = 3
INTRO = (
    "What the image would carry and how fast it answers: `bench/deploy.py` builds the runtime venv with "
    "docker/install.sh (as the Dockerfile does) and compares it with TorchServe's venv plus its JDK; cold start "
    "is process start to first successful prediction. Method in the script's docstring."
)
START_SECONDS = 120


def tree_bytes(path: Path) -> int:
    """Apparent size of every regular file under `path` (symlinks neither followed nor counted)."""
    total = 0
    for dirpath, _, files in os.walk(path):
        for name in files:
            p = os.path.join(dirpath, name)
            if not os.path.islink(p):
                total += os.lstat(p).st_size
    return total


def biggest(site_packages: Path, n: int = 4) -> list[tuple[str, int]]:
    sizes = [(p.name, tree_bytes(p) if p.is_dir() else p.stat().st_size) for p in site_packages.iterdir()]
    return sorted(sizes, key=lambda s: -s[1])[:n]


def mib(n: int) -> str:
    return f"{n / 2**20:,.0f} MiB"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def build_venv() -> Path:
    """docker/install.sh's two steps (wheel, runtime venv), as the Dockerfile runs them."""
    venv, wheels, src = OUT / "venv", OUT / "wheels", OUT / "src"
    for p in (venv, wheels, src):
        shutil.rmtree(p, ignore_errors=True)
    src.mkdir(parents=True)
    for name in ("pyproject.toml", "README.md"):  # what the builder stage COPYs
        shutil.copy2(ROOT / name, src / name)
    for name in ("serve", "handlers"):
        shutil.copytree(ROOT / name, src / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
    env["PYTHON"] = getattr(sys, "_base_executable", sys.executable)
    install = ROOT / "docker" / "install.sh"
    subprocess.run(["sh", str(install), "wheel", str(src), str(wheels)], env=env, check=True, capture_output=True)
    subprocess.run(["sh", str(install), "runtime", str(venv), str(wheels), "cpu"], env=env, check=True)
    return venv


def site_packages(venv: Path) -> Path:
    return next((venv / "lib").glob("python3*/site-packages"))


def stdlib_bytes(python: str) -> tuple[str, int]:
    code = "import sys, sysconfig; print(sys.version.split()[0]); print(sysconfig.get_paths()['stdlib'])"
    version, stdlib = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    lib = Path(stdlib)
    total = tree_bytes(lib) - sum(tree_bytes(p) for p in lib.glob("site-packages")) - tree_bytes(lib / "test")
    return version, total


def jdk_dir() -> Path | None:
    java = shutil.which("java")
    if java is None:
        return None
    real = Path(java).resolve()
    for parent in real.parents:
        if parent.parent == Path("/usr/lib/jvm"):
            return parent
    return real.parents[1]


# ---- cold start ----


def post(url: str, body: bytes, ctype: str) -> bool:
    request = urllib.request.Request(url, data=body, headers={"Content-Type": ctype}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            r.read()
            return r.status == 200
    except (urllib.error.URLError, ConnectionError, TimeoutError):
        return False


def time_to_prediction(start: Callable[[Path, int], subprocess.Popen[bytes]], url_of: Callable[[int], str],
                       body: bytes, ctype: str, workdir: Path) -> float:  # fmt: skip
    """Seconds from spawning the server to its first 200 on the prediction URL; the server is stopped after."""
    shutil.rmtree(workdir, ignore_errors=True)
    workdir.mkdir(parents=True)
    port = free_port()
    t0 = time.perf_counter()
    proc = start(workdir, port)
    try:
        while not post(url_of(port), body, ctype):
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}; see {workdir}")
            if time.perf_counter() - t0 > START_SECONDS:
                raise RuntimeError(f"no prediction within {START_SECONDS} s; see {workdir}")
            time.sleep(0.02)
        return time.perf_counter() - t0
    finally:
        stop(proc)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the process group this script started (the server and its workers), SIGKILL after 60 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    with contextlib.suppress(ProcessLookupError):  # workers left behind by a launcher that exited first
        os.killpg(proc.pid, signal.SIGKILL)


def serve_starter(venv: Path, store: Path) -> Callable[[Path, int], subprocess.Popen[bytes]]:
    def start(workdir: Path, port: int) -> subprocess.Popen[bytes]:
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        env.update(
            PATH=f"{venv / 'bin'}:{env.get('PATH', '')}",
            PYTHONUNBUFFERED="1",
            TS_CONFIG_FILE=str(ROOT / "docker" / "config.properties"),
            TS_INFERENCE_ADDRESS=f"http://127.0.0.1:{port}",
            TS_MANAGEMENT_ADDRESS=f"http://127.0.0.1:{free_port()}",
            TS_METRICS_ADDRESS=f"http://127.0.0.1:{free_port()}",
            TS_GRPC_INFERENCE_ADDRESS="127.0.0.1",
            TS_GRPC_MANAGEMENT_ADDRESS="127.0.0.1",
            TS_GRPC_INFERENCE_PORT=str(free_port()),
            TS_GRPC_MANAGEMENT_PORT=str(free_port()),
            TMPDIR=str(workdir),
        )
        cmd = [
            str(venv / "bin" / "serve"),
            "start",
            "--foreground",
            "--model-store",
            str(store),
            "--disable-token-auth",
        ]
        with open(workdir / "server.log", "wb") as log:
            return subprocess.Popen(cmd, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)  # fmt: skip

    return start


def torchserve_starter(store: Path) -> Callable[[Path, int], subprocess.Popen[bytes]]:
    def start(workdir: Path, port: int) -> subprocess.Popen[bytes]:
        config = workdir / "config.properties"
        config.write_text("\n".join([
            f"inference_address=http://127.0.0.1:{port}",
            f"management_address=http://127.0.0.1:{free_port()}",
            f"metrics_address=http://127.0.0.1:{free_port()}",
            "disable_token_authorization=true", "default_workers_per_model=1", "install_py_dep_per_model=false",
        ]) + "\n")  # fmt: skip
        env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")}
        env["PATH"] = f"{TS_ANCHOR / '.venv' / 'bin'}:{env.get('PATH', '')}"
        cmd = [str(TS_ANCHOR / ".venv" / "bin" / "torchserve"), "--start", "--foreground", "--ncs", "--ts-config",
               str(config), "--model-store", str(store), "--models", "mlp=mlp.mar", "--disable-token-auth"]  # fmt: skip
        with open(workdir / "server.log", "wb") as log:
            return subprocess.Popen(cmd, cwd=workdir, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    start_new_session=True)  # fmt: skip

    return start


def build_stores(venv: Path) -> tuple[Path, Path]:
    """digits.mar (with the venv's model-archiver) and mlp.mar (the anchor's models.py, seeded weights)."""
    store = OUT / "store"
    shutil.rmtree(store, ignore_errors=True)
    store.mkdir(parents=True)
    sys.path.insert(0, str(ROOT))
    from examples.build_model_store import digits

    subprocess.run([str(venv / "bin" / "model-archiver"), *digits().argv(store)], check=True)
    mlp_store = OUT / "store-mlp"
    shutil.rmtree(mlp_store, ignore_errors=True)
    mlp_store.mkdir()
    import serve
    from serve.archive import package
    from serve.worker.handler_loader import import_user_file

    models = import_user_file(ANCHOR_SRC, "models.py", torch_compat=True)
    weights = OUT / "mlp.pt"
    serve.save(models.build("mlp").state_dict(), weights)
    package("mlp", "1.0", str(ROOT / "bench" / "serve_bench_handler.py"), serialized_file=weights,
            extra_files=[ANCHOR_SRC / "models.py"], export_path=mlp_store, force=True, progress=False)  # fmt: skip
    return store, mlp_store


def median_start(label: str, start: Callable[[Path, int], subprocess.Popen[bytes]], model: str, body: bytes,
                 ctype: str) -> list[float]:  # fmt: skip
    runs = []
    for i in range(REPEATS):
        url_of = lambda port: f"http://127.0.0.1:{port}/predictions/{model}"  # noqa: E731
        runs.append(time_to_prediction(start, url_of, body, ctype, OUT / f"run-{label}-{i}"))
        print(f"{label}: {runs[-1]:.2f} s", flush=True)
    return runs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--write", action="store_true", help="replace the deploy section of bench/RESULTS.md")
    parser.add_argument("--no-torchserve", action="store_true", help="skip TorchServe's cold start")
    args = parser.parse_args()
    OUT.mkdir(parents=True, exist_ok=True)

    venv = build_venv()
    ours = tree_bytes(venv)
    ours_top = biggest(site_packages(venv))
    py_version, stdlib = stdlib_bytes(str(venv / "bin" / "python"))
    ts_venv = TS_ANCHOR / ".venv"
    theirs = tree_bytes(ts_venv) if ts_venv.exists() else 0
    ts_top = biggest(site_packages(ts_venv)) if theirs else []
    jdk = jdk_dir()
    jdk_bytes = tree_bytes(jdk) if jdk else 0

    store, mlp_store = build_stores(venv)
    sample = (ROOT / "examples" / "digits" / "sample.png").read_bytes()
    mlp_body = (TS_ANCHOR / "build" / "mlp.json").read_bytes() if (TS_ANCHOR / "build" / "mlp.json").exists() else b""
    if not mlp_body:
        mlp_body = json.dumps([0.0] * 64).encode()
    digits_runs = median_start("serve-digits", serve_starter(venv, store), "digits", sample, "image/png")
    mlp_runs = median_start("serve-mlp", serve_starter(venv, mlp_store), "mlp", mlp_body, "application/json")
    ts_runs: list[float] = []
    ts_note = ""
    if args.no_torchserve:
        ts_note = "not measured (--no-torchserve)"
    elif not (ts_venv / "bin" / "torchserve").exists() or jdk is None:
        ts_note = "not measured (no TorchServe anchor venv or no java on this machine)"
    else:
        try:
            ts_runs = median_start("torchserve-mlp", torchserve_starter(TS_ANCHOR / "model_store"), "mlp", mlp_body,
                                   "application/json")  # fmt: skip
        except RuntimeError as e:
            ts_note = f"not measured ({e})"

    def fmt_runs(runs: list[float]) -> str:
        return f"**{statistics.median(runs):.2f} s** ({', '.join(f'{r:.2f}' for r in runs)})" if runs else ts_note

    top = lambda items: ", ".join(f"{n} {mib(b)}" for n, b in items)  # noqa: E731
    cpus = os.cpu_count()
    lines = [
        f"`python bench/deploy.py {' '.join(sys.argv[1:])}`, {datetime.date.today()}, {platform.machine()}, "
        f"{cpus} CPUs, Python {py_version}. Installed trees an image would contain (apparent size, symlinks not "
        "followed); no Docker engine ran, so these are not image sizes.",
        "",
        "| runtime environment | size | largest parts |",
        "|---|---:|---|",
        f"| serve: the image's venv (docker/install.sh, cpu) | **{mib(ours)}** | {top(ours_top)} |",
        f"| TorchServe: anchor venv (torch + torchserve) | {mib(theirs)} | {top(ts_top)} |",
        f"| TorchServe: JDK (`{jdk}`) | {mib(jdk_bytes)} | |",
        f"| TorchServe total | **{mib(theirs + jdk_bytes)}** | |",
        f"| (both) the Python {py_version} standard library from the base image, not counted above | {mib(stdlib)} | |",
        "",
        f"serve's runtime environment is {ours / max(theirs + jdk_bytes, 1):.1%} of TorchServe's "
        f"({(theirs + jdk_bytes) / max(ours, 1):.0f}x smaller).",
        "",
        "| cold start: process start to first successful prediction (median of 3, the runs) | time |",
        "|---|---:|",
        f"| serve, digits example (LeNet, --torch-compat), image entry point and config | {fmt_runs(digits_runs)} |",
        f"| serve, the anchor's MLP 64-128-10 | {fmt_runs(mlp_runs)} |",
        f"| TorchServe 0.12.0, the anchor's MLP (mlp.mar, 1 worker) | {fmt_runs(ts_runs)} |",
    ]
    text = "\n".join(lines)
    print(text)
    if args.write:
        old = RESULTS.read_text()
        if BEGIN not in old:
            old = old.rstrip("\n") + f"\n\n{TITLE}\n\n{INTRO}\n\n{BEGIN}\n{END}\n"
        head, _, rest = old.partition(BEGIN)
        RESULTS.write_text(f"{head}{BEGIN}\n{text}\n{END}{rest.partition(END)[2]}")


if __name__ == "__main__":
    main()
