"""`grpc_server`: runs a test once on each gRPC server implementation (harness.IMPLEMENTATIONS)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.unit.frontends.grpc import harness


@pytest.fixture(params=harness.IMPLEMENTATIONS)
def grpc_server(request: pytest.FixtureRequest) -> Iterator[str]:
    harness.IMPLEMENTATION = request.param
    try:
        yield request.param
    finally:
        harness.IMPLEMENTATION = "serve"
