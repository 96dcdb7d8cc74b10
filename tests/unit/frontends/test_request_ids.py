"""Request ids (serve/frontends/request_ids.py): UUID-shaped, unique, made without the kernel's random source, and
what every inference frontend gives the requests it submits (REST predictions, KServe v1, v2 infer without an id;
gRPC Predictions: grpc/test_grpc_request_ids.py)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest

from serve.frontends import request_ids
from tests.unit.frontends import fakes


def test_ids_are_version_4_uuids_unique_and_drawn_without_a_system_call(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_urandom(n: int) -> bytes:
        raise AssertionError("a request id read the kernel's random source")

    monkeypatch.setattr(os, "urandom", no_urandom)
    ids = [request_ids.new_request_id() for _ in range(10_000)]
    assert len(set(ids)) == len(ids)
    assert all(uuid.UUID(i).version == 4 and str(uuid.UUID(i)) == i for i in ids)


def numbered(request_id: str) -> bool:
    """Made by new_request_id in this process (its random prefix)."""
    return request_id[:24] == request_ids.new_request_id()[:24]


def test_every_rest_frontend_numbers_its_requests(tmp_path: Path) -> None:
    async def check(server: fakes.Server) -> None:
        await server.inference.post("/predictions/mnist", content=b"[1]", headers={"content-type": "application/json"})
        await server.inference.post("/v1/models/mnist:predict", json={"instances": [[1.0]]})
        v2 = {"inputs": [{"name": "x", "shape": [1], "datatype": "FP32", "data": [1.0]}]}
        await server.inference.post("/v2/models/mnist/infer", json=v2)
        await server.inference.post("/v2/models/mnist/infer", json={**v2, "id": "mine"})
        submitted = [call[3].request_id for call in server.registry.calls if call[0] == "submit"]
        assert len(submitted) == 4 and all(map(numbered, submitted[:3])) and submitted[3] == "mine"

    fakes.run(check, tmp_path)
