"""Reading k8s/ as the cluster would: rendered kustomize output, a container's `serve` command line and environment
replayed through serve's own parser and config loader, and the ports each listener of the resulting Settings uses.
"""

from __future__ import annotations

import base64
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import yaml

from serve.cli.main import build_parser, settings_from_args
from serve.config import Settings, load_settings, parse_address

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "k8s"
BASE = K8S / "base"
OVERLAYS = sorted(p.parent for p in (K8S / "overlays").glob("*/kustomization.yaml"))
ISVC_FILE = K8S / "kserve" / "inferenceservice.yaml"
ADAPTER_VALUES = K8S / "prometheus-adapter" / "values.yaml"
CONFIG_NAME = "config.properties"


def load_docs(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def render(directory: Path) -> list[dict[str, Any]]:
    """`kubectl kustomize <directory>`, parsed; the test is skipped where kubectl is absent."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl is not installed: kustomize rendering is not checked")
    out = subprocess.run([kubectl, "kustomize", str(directory)], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, f"kubectl kustomize {directory} failed:\n{out.stderr}"
    return [doc for doc in yaml.safe_load_all(out.stdout) if doc]


def find(docs: Iterable[dict[str, Any]], kind: str, name: str | None = None) -> dict[str, Any]:
    found = [d for d in docs if d["kind"] == kind and (name is None or d["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


class Pod:
    """The serve container of a pod spec, with the ConfigMap and Secret documents it refers to."""

    def __init__(self, pod_spec: dict[str, Any], docs: list[dict[str, Any]], container: str) -> None:
        self.spec = pod_spec
        self.container = next(c for c in pod_spec["containers"] if c["name"] == container)
        self.docs = docs

    def volume(self, name: str) -> dict[str, Any]:
        return next(v for v in self.spec["volumes"] if v["name"] == name)

    def mount_of(self, path: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
        """(volumeMount, volume) of the deepest mount holding `path`."""
        mounts = [m for m in self.container["volumeMounts"] if Path(path).is_relative_to(m["mountPath"])]
        assert mounts, f"{path} is on no volume of the container (its root filesystem is read-only)"
        mount = max(mounts, key=lambda m: len(m["mountPath"]))
        return mount, self.volume(mount["name"])

    def config_text(self) -> str:
        """config.properties of the ConfigMap mounted where --ts-config points."""
        _, volume = self.mount_of(self.flag("--ts-config"))
        config_map = find(self.docs, "ConfigMap", volume["configMap"]["name"])
        return config_map["data"][CONFIG_NAME]

    def flag(self, name: str) -> str:
        args = self.container["args"]
        return args[args.index(name) + 1]

    def environment(self) -> dict[str, str]:
        """The container's environment: envFrom Secrets, then env; resource references resolve to "2"."""
        env: dict[str, str] = {}
        for source in self.container.get("envFrom", []):
            secret = find(self.docs, "Secret", source["secretRef"]["name"])
            env.update(secret.get("stringData", {}))
            env.update({k: base64.b64decode(v).decode() for k, v in secret.get("data", {}).items()})
        for var in self.container.get("env", []):
            env[var["name"]] = var.get("value", "2")  # valueFrom: resourceFieldRef
        return env

    def prestop_seconds(self) -> int:
        command = self.container["lifecycle"]["preStop"]["exec"]["command"]
        assert command[0] == "sleep", command
        return int(command[1])


def replay(
    pod: Pod, workdir: Path, environ: dict[str, str] | None = None
) -> tuple[Settings, list[str], dict[str, str]]:
    """Settings the container's command line and environment give, with its config file and model store copied
    under `workdir`: (settings, argv for `python -m serve.cli.main`, environment). The argv is parsed by serve's
    real parser, so a flag the CLI lacks fails here."""
    assert pod.container["command"] == ["serve"], "the image's console script `serve` runs the server"
    config = workdir / CONFIG_NAME
    config.write_text(pod.config_text())
    store = workdir / "model-store"
    store.mkdir(exist_ok=True)
    moved = {pod.flag("--ts-config"): str(config), pod.flag("--model-store"): str(store)}
    argv = [moved.get(arg, arg) for arg in pod.container["args"]]
    env = {k: moved.get(v, v) for k, v in pod.environment().items()}
    env.update(environ or {})
    args = build_parser().parse_args(argv)
    assert args.command == "start" and args.foreground, "a container runs `serve start --foreground`"
    return load_settings(settings_from_args(args), env), argv, env


def listener_ports(settings: Settings) -> dict[str, int]:
    """{listener: port} of the five listeners."""
    ports = {name: parse_address(getattr(settings, f"{name}_address"))[1] for name in ("inference", "management",
                                                                                         "metrics")}  # fmt: skip
    ports["grpc_inference"] = settings.grpc_inference_port
    ports["grpc_management"] = settings.grpc_management_port
    return ports


def listener_hosts(settings: Settings) -> dict[str, str]:
    hosts = {name: parse_address(getattr(settings, f"{name}_address"))[0] for name in ("inference", "management",
                                                                                       "metrics")}  # fmt: skip
    hosts["grpc_inference"] = settings.grpc_inference_address
    hosts["grpc_management"] = settings.grpc_management_address
    return hosts
