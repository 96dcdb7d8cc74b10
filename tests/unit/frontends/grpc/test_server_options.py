"""create_grpc_servers' options: messages over grpcio's 4 MiB default, TLS (enable_grpc_ssl), a port it cannot bind."""

from __future__ import annotations

import asyncio
import socket
import subprocess
from pathlib import Path

import grpc
import pytest
from google.protobuf import empty_pb2

from serve.batching import InferenceRequest, InferenceResponse
from serve.errors import ConfigError
from serve.frontends import DataPlane
from serve.frontends.grpc.generated import inference_pb2 as pb
from serve.frontends.grpc.generated import inference_pb2_grpc as pb_grpc
from serve.frontends.grpc.server import bound_port, create_grpc_servers
from serve.frontends.http import TokenAuth
from serve.metrics import ServerMetrics
from tests.unit.frontends.fakes import FakeRegistry, settings
from tests.unit.frontends.grpc.harness import Env, run

pytestmark = pytest.mark.usefixtures("grpc_server")  # each test on serve's gRPC server and grpcio's

BIG = 6 * 1024 * 1024  # over grpcio's 4 MiB default
UNLIMITED = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]


def test_messages_over_4_mib_both_ways(tmp_path: Path) -> None:
    async def mirror(request: InferenceRequest) -> InferenceResponse:
        return InferenceResponse(body=bytes(request.inputs["data"]))

    registry = FakeRegistry()
    registry.responder = mirror

    async def test(env: Env) -> None:
        # the harness' channel has grpcio's client limits
        async with grpc.aio.insecure_channel(env.inference_target, options=UNLIMITED) as channel:
            answer = await pb_grpc.InferenceAPIsServiceStub(channel).Predictions(
                pb.PredictionsRequest(model_name="mnist", input={"data": b"x" * BIG}))  # fmt: skip
            assert len(answer.prediction) == BIG

    run(test, tmp_path, registry, max_request_size=BIG + 1024, max_response_size=BIG + 1024)


def test_a_response_over_max_response_size_fails(tmp_path: Path) -> None:
    async def large(request: InferenceRequest) -> InferenceResponse:
        return InferenceResponse(body=b"y" * 10_000)

    registry = FakeRegistry()
    registry.responder = large

    async def test(env: Env) -> None:
        with pytest.raises(grpc.aio.AioRpcError) as err:
            await pb_grpc.InferenceAPIsServiceStub(env.inference).Predictions(pb.PredictionsRequest(model_name="mnist"))
        assert err.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED

    run(test, tmp_path, registry, max_response_size=5_000)


def _self_signed(tmp_path: Path) -> tuple[Path, Path]:
    key, cert = tmp_path / "key.pem", tmp_path / "cert.pem"
    command = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", str(key), "-out", str(cert),
               "-days", "1", "-subj", "/CN=localhost"]  # fmt: skip
    subprocess.run(command, check=True, capture_output=True, timeout=60)
    return key, cert


def test_tls_when_enable_grpc_ssl(tmp_path: Path) -> None:
    key, cert = _self_signed(tmp_path)
    config = settings(tmp_path, grpc_inference_port=0, grpc_management_port=0,
                      enable_grpc_ssl=True, private_key_file=key, certificate_file=cert)  # fmt: skip
    dataplane = DataPlane(FakeRegistry(), ServerMetrics(hostname="testhost"), config)

    async def main() -> None:
        servers = create_grpc_servers(dataplane, config, TokenAuth.from_settings(config))
        for server in servers:
            await server.start()
        try:
            credentials = grpc.ssl_channel_credentials(root_certificates=cert.read_bytes())
            options = [("grpc.ssl_target_name_override", "localhost")]
            target = f"127.0.0.1:{bound_port(servers[0])}"
            async with grpc.aio.secure_channel(target, credentials, options=options) as channel:
                answer = await pb_grpc.InferenceAPIsServiceStub(channel).Ping(empty_pb2.Empty(), timeout=5)
                assert "Healthy" in answer.health
            async with grpc.aio.insecure_channel(target) as plain:  # plaintext is refused
                with pytest.raises(grpc.aio.AioRpcError):
                    await pb_grpc.InferenceAPIsServiceStub(plain).Ping(empty_pb2.Empty(), timeout=2)
        finally:
            await asyncio.gather(*(server.stop(0) for server in servers))

    asyncio.run(asyncio.wait_for(main(), timeout=20))


def test_tls_without_a_certificate_is_a_config_error(tmp_path: Path) -> None:
    config = settings(tmp_path, grpc_inference_port=0, grpc_management_port=0, enable_grpc_ssl=True)
    dataplane = DataPlane(FakeRegistry(), ServerMetrics(hostname="testhost"), config)

    async def main() -> None:
        with pytest.raises(ConfigError, match="certificate_file and private_key_file"):
            create_grpc_servers(dataplane, config, TokenAuth.from_settings(config))

    asyncio.run(main())


def test_a_port_in_use_is_a_config_error_that_names_the_setting(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        config = settings(tmp_path, grpc_inference_port=taken.getsockname()[1], grpc_management_port=0)
        dataplane = DataPlane(FakeRegistry(), ServerMetrics(hostname="testhost"), config)

        async def main() -> None:
            with pytest.raises(ConfigError, match="grpc_inference_address / grpc_inference_port"):
                create_grpc_servers(dataplane, config, TokenAuth.from_settings(config))

        asyncio.run(main())
