import importlib.util
import os

import pytest

import serve

# Kernel choices are timed afresh in every test (and in every server a test starts, which inherits this): a choice
# kept from an earlier run would skip the timing the plan tests check, and tests must not write to ~/.cache.
# tests/unit/inference/test_tuning.py turns the cache on in a temporary directory.
os.environ["SERVE_TUNING_CACHE"] = "off"

# Modules that compare against tritonclient (a test-extra reference client, like torch) are not collected when it
# is missing, so a partial install skips them cleanly instead of failing at import.
collect_ignore = [] if importlib.util.find_spec("tritonclient") else [
    "integration/test_oip.py", "integration/test_grpc.py", "unit/frontends/oip/test_core.py",
    "unit/frontends/oip/test_tensors.py",
]  # fmt: skip


@pytest.fixture(autouse=True)
def _seed_and_grad_mode():
    serve.manual_seed(0)
    serve.set_grad_enabled(True)
    yield


def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` (every test under tests/gpu/) skip unless CuPy sees an NVIDIA GPU.

    serve.cuda is asked only when such a test was collected, so a CPU-only run never imports cupy.
    """
    gpu_items = [item for item in items if item.get_closest_marker("gpu") or "/tests/gpu/" in str(item.fspath)]
    if not gpu_items:
        return
    if serve.cuda.is_available():
        for item in gpu_items:
            item.add_marker(pytest.mark.gpu)
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU with CuPy (serve.cuda.is_available() is False)")
    for item in gpu_items:
        item.add_marker(skip)
