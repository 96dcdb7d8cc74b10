"""k8s/ checked offline: every manifest and the rendered kustomize output of the base and each overlay validate
against the Kubernetes schemas (kubernetes-validate, strict, a pinned version); the InferenceService, a custom
resource those schemas lack, is checked by hand against the KServe v1beta1 fields it uses (its pod part against the
Pod schema). The probes, ports, Service and drain budget are compared with what the server really uses: the
container's command line and environment are replayed through serve's CLI parser and config loader, and a real
server started that way answers every probe, the Prometheus scrape and the series the adapter rules read.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from serve.server import GRACEFUL_SECONDS
from tests.e2e.k8s_manifests import (
    ADAPTER_VALUES,
    BASE,
    ISVC_FILE,
    K8S,
    OVERLAYS,
    Pod,
    find,
    listener_hosts,
    listener_ports,
    load_docs,
    render,
    replay,
)
from tests.integration.server import PROBE_SECONDS, START_SECONDS, recorder_archive

# pinned: grpc probes are GA since 1.27, PDB unhealthyPodEvictionPolicy is on by default since 1.27
KUBERNETES_VERSION = "1.30.0"
ISVC_API = "serving.kserve.io/v1beta1"


@pytest.fixture(scope="module")
def kv() -> Any:
    return pytest.importorskip("kubernetes_validate")


def validate(kv: Any, docs: list[dict[str, Any]]) -> None:
    for doc in docs:
        if doc["apiVersion"] == ISVC_API:
            continue  # a custom resource: test_inferenceservice_uses_kserve_v1beta1_fields
        try:
            kv.validate(doc, KUBERNETES_VERSION, strict=True)
        except Exception as e:  # jsonschema's ValidationError (kv raises its base class), SchemaNotFoundError
            where = list(getattr(e, "path", []))
            pytest.fail(f"{doc['kind']} {doc['metadata'].get('name')}: {getattr(e, 'message', e)} at {where}")


def base_resources() -> list[Path]:
    kustomization = load_docs(BASE / "kustomization.yaml")[0]
    return [BASE / name for name in kustomization["resources"]]


def base_pod(docs: list[dict[str, Any]] | None = None) -> Pod:
    docs = render(BASE) if docs is None else docs
    return Pod(find(docs, "Deployment", "serve")["spec"]["template"]["spec"], docs, "serve")


def isvc_pod() -> Pod:
    docs = load_docs(ISVC_FILE)
    predictor = find(docs, "InferenceService")["spec"]["predictor"]
    return Pod({k: v for k, v in predictor.items() if k not in EXTENSION_FIELDS}, docs, "kserve-container")


# ---- schemas and rendering ------------------------------------------------------------------------------------


def test_every_yaml_file_under_k8s_is_checked_by_this_module() -> None:
    kustomize_inputs = {p for d in (K8S / "overlays", K8S / "components") for p in d.rglob("*.yaml")}
    known = {*base_resources(), BASE / "kustomization.yaml", ISVC_FILE, ADAPTER_VALUES, *kustomize_inputs}
    assert set(K8S.rglob("*.yaml")) - known == set(), "a new manifest needs a check here"


def test_every_base_manifest_validates(kv: Any) -> None:
    for path in base_resources():
        docs = load_docs(path)
        assert docs, f"{path} is empty"
        validate(kv, docs)


@pytest.mark.parametrize("directory", [BASE, *OVERLAYS], ids=lambda p: str(p.relative_to(K8S)))
def test_rendered_kustomization_validates(kv: Any, directory: Path) -> None:
    docs = render(directory)
    kinds = {d["kind"] for d in docs}
    assert {"Namespace", "ConfigMap", "Secret", "PersistentVolumeClaim", "Deployment", "Service",
            "HorizontalPodAutoscaler", "PodDisruptionBudget"} <= kinds  # fmt: skip
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] != "Namespace"} == {"serve"}
    validate(kv, docs)


def test_gpu_overlay_asks_for_a_gpu_on_gpu_nodes() -> None:
    pod = base_pod(render(K8S / "overlays" / "gpu"))
    assert pod.container["image"] == "serve:latest-gpu"
    assert pod.container["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert pod.spec["nodeSelector"] and any(t["key"] == "nvidia.com/gpu" for t in pod.spec["tolerations"])
    env = pod.environment()
    assert env["TS_NUMBER_OF_GPU"] == "1" and "TS_CONFIG_FILE" in env  # the base's variables survive the patch


def test_queue_latency_overlay_adds_the_adapter_metric() -> None:
    import yaml

    hpa = find(render(K8S / "overlays" / "queue-latency"), "HorizontalPodAutoscaler", "serve")
    assert {m["type"] for m in hpa["spec"]["metrics"]} == {"Resource", "Pods"}
    pods_metric = next(m for m in hpa["spec"]["metrics"] if m["type"] == "Pods")["pods"]["metric"]["name"]
    rules = yaml.safe_load(ADAPTER_VALUES.read_text())["rules"]["custom"]
    assert pods_metric in {rule["name"]["as"] for rule in rules}
    assert find(render(BASE), "HorizontalPodAutoscaler")["spec"]["metrics"][0]["resource"]["name"] == "cpu"


# ---- the manifests against the server's configuration --------------------------------------------------------


def test_ports_probes_and_service_match_the_servers_settings(tmp_path: Path) -> None:
    docs = render(BASE)
    pod = base_pod(docs)
    settings, _, env = replay(pod, tmp_path)
    ports = listener_ports(settings)
    assert set(listener_hosts(settings).values()) == {"0.0.0.0"}, "listeners on loopback are unreachable in a pod"
    container_ports = {p["name"]: p["containerPort"] for p in pod.container["ports"]}
    assert sorted(container_ports.values()) == sorted(ports.values()) == [7070, 7071, 8080, 8081, 8082]
    service = find(docs, "Service", "serve")
    assert {p["port"] for p in service["spec"]["ports"]} == set(ports.values())
    for port in service["spec"]["ports"]:
        assert container_ports[port["targetPort"]] == port["port"], port
    assert pod.container["readinessProbe"]["httpGet"] == {"path": "/ping", "port": ports["inference"]}
    assert pod.container["livenessProbe"]["httpGet"]["port"] == ports["inference"]
    assert pod.container["startupProbe"]["grpc"]["port"] == ports["grpc_inference"]
    annotations = find(docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert (
        int(annotations["prometheus.io/port"]) == ports["metrics"] and annotations["prometheus.io/path"] == "/metrics"
    )
    assert settings.disable_token_authorization is True  # the Secret's choice reached the server through TS_*
    assert env["TS_CONFIG_FILE"] == str(tmp_path / "config.properties")  # the env and --ts-config name one file


@pytest.mark.parametrize("which", ["deployment", "inferenceservice"])
def test_grace_period_covers_the_servers_drain(tmp_path: Path, which: str) -> None:
    pod = base_pod() if which == "deployment" else isvc_pod()
    settings, _, _ = replay(pod, tmp_path)
    drain = pod.prestop_seconds() + GRACEFUL_SECONDS + settings.unregister_model_timeout
    assert pod.spec["terminationGracePeriodSeconds"] >= drain


@pytest.mark.parametrize("which", ["deployment", "inferenceservice"])
def test_the_server_writes_only_to_writable_volumes(tmp_path: Path, which: str) -> None:
    """Root filesystem read-only: the key file, logs, TMPDIR and the working directory are on emptyDirs; the
    config and the model store on read-only mounts."""
    pod = base_pod() if which == "deployment" else isvc_pod()
    assert pod.container["securityContext"]["readOnlyRootFilesystem"] is True
    assert pod.spec["securityContext"]["runAsNonRoot"] is True
    env = pod.environment()
    config_text = pod.config_text()
    key_file = re.search(r"^key_file=(.+)$", config_text, re.M)
    assert key_file, "key_file must point at a writable volume"
    for path in (key_file.group(1), env["LOG_LOCATION"], env["TMPDIR"], pod.container["workingDir"]):
        mount, volume = pod.mount_of(path)
        assert "emptyDir" in volume and not mount.get("readOnly"), path
    for path in (pod.flag("--ts-config"), pod.flag("--model-store")):
        if which == "inferenceservice" and path == "/mnt/models":
            continue  # KServe mounts the model volume itself
        mount, _ = pod.mount_of(path)
        assert mount.get("readOnly") is True, path


# ---- the InferenceService: a custom resource, checked by hand -------------------------------------------------

# KServe v1beta1 ComponentExtensionSpec (pkg/apis/serving/v1beta1/component.go); everything else in a predictor
# is either a model framework (not used: this is a custom predictor) or the inlined core/v1 PodSpec
EXTENSION_FIELDS = {"minReplicas", "maxReplicas", "scaleTarget", "scaleMetric", "containerConcurrency", "timeout",
                    "canaryTrafficPercent", "logger", "batcher", "labels", "annotations",
                    "deploymentStrategy"}  # fmt: skip
FRAMEWORKS = {"model", "sklearn", "xgboost", "tensorflow", "pytorch", "triton", "onnx", "huggingface", "pmml",
              "lightgbm", "paddle", "workerSpec"}  # fmt: skip
STORAGE_PREFIXES = ("gs://", "s3://", "pvc://", "hdfs://", "webhdfs://", "http://", "https://", "hf://", "oci://")
ISVC_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")  # KServe's InvalidISVCNameFormatError regex


def test_inferenceservice_uses_kserve_v1beta1_fields(kv: Any) -> None:
    docs = load_docs(ISVC_FILE)
    validate(kv, docs)  # the ConfigMap beside it
    isvc = find(docs, "InferenceService")
    assert isvc["apiVersion"] == ISVC_API and ISVC_NAME.match(isvc["metadata"]["name"])
    assert set(isvc) == {"apiVersion", "kind", "metadata", "spec"}
    assert set(isvc["spec"]) <= {"predictor", "transformer", "explainer"} and "predictor" in isvc["spec"]
    annotations = isvc["metadata"].get("annotations", {})
    assert annotations.get("serving.kserve.io/deploymentMode", "Serverless") in {"Serverless", "RawDeployment"}
    predictor = isvc["spec"]["predictor"]
    assert not set(predictor) & FRAMEWORKS, "a custom predictor sets containers, not a model framework"
    assert predictor["scaleMetric"] in {"cpu", "memory", "concurrency", "rps"}
    assert 0 <= predictor["minReplicas"] <= predictor["maxReplicas"]
    assert all(isinstance(v, str) for v in predictor["annotations"].values())
    pod = isvc_pod()
    # the inlined PodSpec against the Kubernetes Pod schema
    validate(kv, [{"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "predictor"}, "spec": pod.spec}])
    assert pod.spec["containers"][0]["name"] == "kserve-container"
    env = pod.environment()
    assert env["PROTOCOL"] == "v2"  # KServe's CustomSpecProtocolEnvVarKey: v1 or v2
    assert env["STORAGE_URI"].startswith(STORAGE_PREFIXES) and pod.flag("--model-store") == "/mnt/models"
    if annotations.get("serving.kserve.io/deploymentMode", "Serverless") == "Serverless":
        assert len(pod.container["ports"]) == 1, "Knative routes exactly one container port"


def test_inferenceservice_ports_and_probes_match_the_servers_settings(tmp_path: Path) -> None:
    pod = isvc_pod()
    settings, _, _ = replay(pod, tmp_path)
    ports = listener_ports(settings)
    assert set(listener_hosts(settings).values()) == {"0.0.0.0"}
    (port,) = pod.container["ports"]
    assert port["containerPort"] == ports["inference"] and port["name"] in {"http1", "h2c"}
    for probe in ("readinessProbe", "livenessProbe"):
        assert pod.container[probe]["httpGet"]["port"] == ports["inference"]
    predictor = find(load_docs(ISVC_FILE), "InferenceService")["spec"]["predictor"]
    assert int(predictor["annotations"]["prometheus.kserve.io/port"]) == ports["metrics"]


# ---- a real server, configured as the container is ---------------------------------------------------------------


@pytest.mark.parametrize("which", ["deployment", "inferenceservice"])
def test_a_server_started_like_the_container_answers_every_probe(tmp_path: Path, which: str) -> None:
    """The container's argv and environment (paths moved under tmp_path, listeners moved to loopback port 0
    through the TS_* overrides the config enables, or a copy of the config for KServe's), a real `serve` process:
    each probe answers as Kubernetes would ask it, /metrics carries the series the adapter rules read, and SIGTERM
    ends the server within the grace period."""
    pod = base_pod() if which == "deployment" else isvc_pod()
    work = tmp_path / "run"
    work.mkdir()
    manifest_ports = listener_ports(replay(pod, tmp_path)[0])
    ports_file = work / "ports.json"
    overrides = {"TS_KEY_FILE": str(work / "key_file.json"), "LOG_LOCATION": str(work / "logs"),
                 "TMPDIR": str(tmp_path / "tmp"), "TS_PORTS_FILE": str(ports_file)}  # fmt: skip
    (tmp_path / "tmp").mkdir()
    for name in ("inference", "management", "metrics"):
        overrides[f"TS_{name.upper()}_ADDRESS"] = "http://127.0.0.1:0"
    for name in ("grpc_inference", "grpc_management"):
        overrides[f"TS_{name.upper()}_PORT"] = "0"
        overrides[f"TS_{name.upper()}_ADDRESS"] = "127.0.0.1"
    config = pod.config_text()
    if "enable_envvars_config=true" not in config:  # KServe's config: the same overrides, as a copy of the file
        config_map = find(pod.docs, "ConfigMap")
        config_map["data"] = {"config.properties": config + "enable_envvars_config=true\n"}
    settings, argv, env = replay(pod, tmp_path, overrides)
    assert set(listener_ports(settings).values()) == {0}  # each listener takes a free port and reports it
    recorder_archive(Path(settings.model_store), "rec", tmp_path / "batches.log")
    proc_env = {**os.environ, **env}
    with open(tmp_path / "server.log", "wb") as log:
        proc = subprocess.Popen([sys.executable, "-m", "serve.cli.main", *argv], cwd=work, env=proc_env,
                                stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        live = _bound_ports(ports_file, proc, tmp_path)
        by_port = {manifest_ports[name]: live[name] for name in manifest_ports}
        ready = pod.container["readinessProbe"]["httpGet"]
        _wait_for(f"http://127.0.0.1:{by_port[ready['port']]}{ready['path']}", proc, tmp_path)
        for probe in ("readinessProbe", "livenessProbe", "startupProbe"):
            spec = pod.container.get(probe)
            if spec is None:
                continue
            if "grpc" in spec:
                assert _grpc_health(by_port[spec["grpc"]["port"]]) == "SERVING", probe
            else:
                get = spec["httpGet"]
                answer = httpx.get(f"http://127.0.0.1:{by_port[get['port']]}{get['path']}", timeout=PROBE_SECONDS)
                assert answer.status_code == 200, (probe, answer.text)
        inference = f"http://127.0.0.1:{by_port[manifest_ports['inference']]}"
        answer = httpx.post(f"{inference}/predictions/rec", content=b"hi", timeout=30)
        assert answer.status_code == 200, answer.text  # token auth off, as the manifests choose
        _check_scrape(pod, which, by_port[manifest_ports["metrics"]])
        proc.send_signal(signal.SIGTERM)
        budget = pod.spec["terminationGracePeriodSeconds"] - pod.prestop_seconds()
        assert proc.wait(budget) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def _bound_ports(ports_file: Path, proc: subprocess.Popen[bytes], tmp_path: Path) -> dict[str, int]:
    """The ports the server reports in ports_file once every listener is bound."""
    deadline = time.monotonic() + START_SECONDS
    while not ports_file.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            pytest.fail(f"serve wrote no {ports_file.name}:\n{(tmp_path / 'server.log').read_text()[-4000:]}")
        time.sleep(0.05)
    return json.loads(ports_file.read_text())


def _wait_for(url: str, proc: subprocess.Popen[bytes], tmp_path: Path) -> None:
    deadline = time.monotonic() + START_SECONDS
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"serve exited with {proc.returncode}:\n{(tmp_path / 'server.log').read_text()[-4000:]}")
        try:
            if httpx.get(url, timeout=PROBE_SECONDS).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    pytest.fail(f"{url} did not answer 200 within {START_SECONDS} s:\n{(tmp_path / 'server.log').read_text()[-4000:]}")


def _grpc_health(port: int) -> str:
    import grpc
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
        check = health_pb2.HealthCheckRequest(service="")
        reply = health_pb2_grpc.HealthStub(channel).Check(check, timeout=PROBE_SECONDS)
    return health_pb2.HealthCheckResponse.ServingStatus.Name(reply.status)


def _check_scrape(pod: Pod, which: str, port: int) -> None:
    import yaml

    if which == "deployment":
        annotations = find(render(BASE), "Deployment")["spec"]["template"]["metadata"]["annotations"]
        path = annotations["prometheus.io/path"]
    else:
        path = find(load_docs(ISVC_FILE), "InferenceService")["spec"]["predictor"]["annotations"][
            "prometheus.kserve.io/path"
        ]
    text = httpx.get(f"http://127.0.0.1:{port}{path}", timeout=PROBE_SECONDS).text
    series = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line and not line.startswith("#")}
    for rule in yaml.safe_load(ADAPTER_VALUES.read_text())["rules"]["custom"]:
        used = set(re.findall(r"\b(ts_[a-z_]+)\{", rule["seriesQuery"] + rule["metricsQuery"]))
        assert used and used <= series, f"the adapter rule reads {sorted(used - series)}, which /metrics lacks"
