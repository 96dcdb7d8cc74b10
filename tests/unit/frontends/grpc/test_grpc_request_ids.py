"""gRPC Predictions gives its requests the process's request ids (serve/frontends/request_ids.py), on both gRPC
servers."""

from __future__ import annotations

from pathlib import Path

import pytest

from serve.frontends.grpc.generated import inference_pb2 as pb
from serve.frontends.grpc.generated import inference_pb2_grpc as pb_grpc
from tests.unit.frontends.grpc.harness import Env, run
from tests.unit.frontends.test_request_ids import numbered

pytestmark = pytest.mark.usefixtures("grpc_server")


def test_grpc_predictions_numbers_its_requests(tmp_path: Path) -> None:
    async def check(env: Env) -> None:
        stub = pb_grpc.InferenceAPIsServiceStub(env.inference)
        await stub.Predictions(pb.PredictionsRequest(model_name="mnist", input={"data": b"1"}))
        assert numbered(env.registry.calls[-1][3].request_id)

    run(check, tmp_path)
