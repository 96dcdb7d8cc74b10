"""The stubs in serve/frontends/grpc/generated are exactly what `python -m serve.frontends.grpc.regenerate` makes, and
they run on the oldest protobuf and grpcio that pyproject.toml allows."""

from __future__ import annotations

import ast
import re
import tomllib
from pathlib import Path

import pytest

from serve.frontends.grpc import regenerate

GENERATED = regenerate.REPO_ROOT / regenerate.PACKAGE_DIR


def _descriptor(path: Path) -> bytes:
    """The serialized FileDescriptorProto a `_pb2.py` registers: what the .proto says, whatever protoc wrote it."""
    call = re.search(rb"AddSerializedFile\((b'.*?')\)\n", path.read_bytes(), re.S)
    assert call, f"no AddSerializedFile in {path}"
    value = ast.literal_eval(call.group(1).decode())
    assert isinstance(value, bytes)
    return value


def test_generated_stubs_match_the_protos(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools", reason="grpcio-tools (test extra) generates the stubs")
    fresh = regenerate.regenerate(tmp_path, any_version=True)
    committed = sorted(GENERATED.glob("*_pb2*"))
    assert [p.name for p in fresh] == [p.name for p in committed if p.is_file()]
    hint = "differs from what protoc makes of the .proto files: run `python -m serve.frontends.grpc.regenerate`"
    for new in fresh:
        old = GENERATED / new.name
        if regenerate.tools_version() == regenerate.GRPCIO_TOOLS:
            assert new.read_bytes() == old.read_bytes(), f"{old} {hint}"
        elif new.name.endswith("_pb2.py"):  # another protoc writes other code around the same descriptor
            assert _descriptor(new) == _descriptor(old), f"{old} {hint}"


def test_stubs_ask_for_what_pyproject_allows() -> None:
    """The gencode's runtime check and the grpc stubs' version check accept the pins' lower bounds."""
    deps = tomllib.loads((regenerate.REPO_ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    pins = dict(re.match(r"([A-Za-z0-9_.-]+)(.*)", d).groups() for d in deps)  # type: ignore[union-attr]
    major, minor, patch = regenerate.PROTOBUF_GENCODE.split(".")
    assert pins["protobuf"] == f">={regenerate.PROTOBUF_GENCODE},<8"
    for pb2 in GENERATED.glob("*_pb2.py"):
        text = pb2.read_text()
        assert f"# Protobuf Python Version: {regenerate.PROTOBUF_GENCODE}\n" in text
        assert f"    {major},\n    {minor},\n    {patch},\n" in text
    for stub in GENERATED.glob("*_pb2_grpc.py"):
        assert f"GRPC_GENERATED_VERSION = '{regenerate.GRPCIO_TOOLS}'" in stub.read_text()
    for name in ("grpcio", "grpcio-health-checking", "grpcio-reflection"):
        assert pins[name] == f">={regenerate.GRPCIO_TOOLS}", name


def test_regenerate_refuses_another_grpcio_tools(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools", reason="grpcio-tools (test extra) generates the stubs")
    if regenerate.tools_version() == regenerate.GRPCIO_TOOLS:
        pytest.skip("the pinned grpcio-tools is installed")
    with pytest.raises(RuntimeError, match=f"grpcio-tools=={regenerate.GRPCIO_TOOLS}"):
        regenerate.regenerate(tmp_path)


def test_every_proto_is_generated() -> None:
    names = {p.stem for p in regenerate.proto_files()}
    assert names == {"inference", "management", "grpc_predict_v2"}
