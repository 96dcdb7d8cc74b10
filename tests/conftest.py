import pytest

import serve


@pytest.fixture(autouse=True)
def _seed_and_grad_mode():
    serve.manual_seed(0)
    serve.set_grad_enabled(True)
    yield
