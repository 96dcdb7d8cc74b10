import importlib.util

import pytest

import serve

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
