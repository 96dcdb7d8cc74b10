"""TorchServe's custom_metrics example, its files unchanged, on a real server started as its README starts it.

`custom_metrics/mnist_handler.py` (an ImageClassifier over image_classifier/mnist's `mnist.py`) records its
metrics through every form of TorchServe's metrics API, and `get_metric`s two it never adds: `RequestBatchSize`
and `PreprocessCallCount`'s gauge/counter are declared only in `metrics.yaml`, which its `config.properties` names
(`metrics_config=examples/custom_metrics/metrics.yaml`, a path from where the server starts). Without reading that
file every request failed (MetricsCacheKeyError, a 503). The server here starts in a folder holding
`examples/custom_metrics/`, with the example's config.properties as written (after the test's own port-0 lines)
and `--models mnist=mnist.mar`, as the README says; the weights are a seeded stand-in made by torch.

Checked: each answer is torch's digit (the same Net on the real torch, ToTensor and Normalize((0.1307,),
(0.3081,)), argmax); on /metrics each metric of the handler is there with the dimensions the YAML or the call gives
it plus Hostname, and the counters count the requests sent.
"""

from __future__ import annotations

import io
import re
import shutil

import httpx
import pytest
from PIL import Image

from tests.examples.ts_files import archive, example_files, image_bytes, torch_import
from tests.helpers import torch
from tests.integration.server import ServerProcess
from tests.torchvision_reference import reference_torchvision

REQUESTS = 3

pytestmark = pytest.mark.skipif(reference_torchvision() is None, reason="torch and torchvision are not installed")


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    base = tmp_path_factory.mktemp("ts_custom_metrics")
    store, run = base / "store", base / "run"
    store.mkdir()
    mnist = example_files(base / "examples", "image_classifier/mnist")
    metrics = example_files(base / "examples", "custom_metrics")
    torch.manual_seed(7)
    net = torch_import(mnist / "mnist.py").Net().eval()
    torch.save(net.state_dict(), base / "mnist_cnn.pt")
    archive(store, "--model-name", "mnist", "--version", "1.0", "--model-file", str(mnist / "mnist.py"),
            "--serialized-file", str(base / "mnist_cnn.pt"),
            "--handler", str(metrics / "mnist_handler.py"))  # fmt: skip
    server = ServerProcess(run, store, "--ncs", "--disable-token-auth", "--models", "mnist=mnist.mar")
    shutil.copytree(base / "examples", run / "examples")  # metrics_config's path is relative to the server's cwd
    config = run / "config.properties"
    config.write_text(config.read_text() + (metrics / "config.properties").read_text())
    server.start()
    try:
        yield server, net
    finally:
        server.stop()


def family(page: str, name: str) -> list[tuple[str, float]]:
    """(labels, value) of each sample of a metric family on the Prometheus page."""
    return [(m[1], float(m[2])) for m in re.finditer(rf"^{name}(\{{.*\}}) (\S+)$", page, re.M)]


def test_custom_metrics_example_answers_and_exports_its_metrics(served):
    server, net = served
    t = reference_torchvision().transforms
    preprocess = t.Compose([t.ToTensor(), t.Normalize((0.1307,), (0.3081,))])
    for seed in range(REQUESTS):
        body = image_bytes(seed, (28, 28), gray=True, fmt="PNG")
        with torch.no_grad():
            log_probs = net(preprocess(Image.open(io.BytesIO(body)))[None])[0]
        response = httpx.post(f"{server.inference}/predictions/mnist", content=body, timeout=300)
        assert response.status_code == 200, f"{response.status_code} {response.text[:500]}\n{server.log()}"
        if float(log_probs.topk(2).values.diff().abs()) > 1e-4:  # a digit the 1e-5 agreement cannot flip
            assert response.json() == int(log_probs.argmax())
    page = httpx.get(f"{server.metrics}/metrics", timeout=60).text
    host = r'Hostname="[^"]+",'
    expected = {  # name: (labels, value or None when it is a time/size)
        "InferenceRequestCount": (rf"\{{{host}\}}", REQUESTS),  # declared with no dimensions
        "PreprocessCallCount": (rf'\{{ModelName="mnist",{host}\}}', REQUESTS),
        "RequestBatchSize": (rf'\{{ModelName="mnist",{host}\}}', 1),  # declared only in metrics.yaml
        "InitializeCallCount": (rf'\{{ModelName="mnist",Level="Model",{host}\}}', 1),
        "PostprocessCallCount": (rf'\{{ModelName="mnist",Level="Model",{host}\}}', REQUESTS),
        "SizeOfImage": (rf'\{{ModelName="mnist",Level="Model",{host}\}}', None),
        "HandlerMethodTime": (rf'\{{ModelName="mnist",Level="Model",MethodName="preprocess",{host}\}}', None),
    }
    for name, (labels, value) in expected.items():
        samples = family(page, name)
        assert len(samples) == 1 and re.fullmatch(labels, samples[0][0]), f"{name}: {samples}\n{page[-3000:]}"
        assert value is None or samples[0][1] == value, f"{name}: {samples}"
    assert re.search(r'^ExamplePercentMetric_count\{.*ModelName="mnist".*\} 3\.0$', page, re.M), page[-3000:]
