"""The native kernel tests' fixture: each test that takes `build` runs once per kernel build this machine has."""

import pytest

from serve.backend import cpu_libraries
from serve.backend import cpu_native as cn

BUILDS = [name for name in cpu_libraries.supported_isas() if cpu_libraries.library_path(name) is not None]


@pytest.fixture(params=BUILDS or [None])
def build(request):
    """Runs the test once per build this machine has, forcing that build."""
    if request.param is None:
        pytest.skip("no native kernel build for this CPU")
    previous = cn._select(request.param)
    yield request.param
    cn._select(previous)
