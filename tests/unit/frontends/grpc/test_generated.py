"""The stubs in serve/frontends/grpc/generated are exactly what `python -m serve.frontends.grpc.regenerate` makes."""

from __future__ import annotations

from pathlib import Path

import pytest

from serve.frontends.grpc import regenerate


def test_generated_stubs_match_the_protos(tmp_path: Path) -> None:
    pytest.importorskip("grpc_tools", reason="grpcio-tools (test extra) generates the stubs")
    fresh = regenerate.regenerate(tmp_path)
    committed = sorted((regenerate.REPO_ROOT / regenerate.PACKAGE_DIR).glob("*_pb2*"))
    assert [p.name for p in fresh] == [p.name for p in committed if p.is_file()]
    for new in fresh:
        old = regenerate.REPO_ROOT / regenerate.PACKAGE_DIR / new.name
        assert new.read_bytes() == old.read_bytes(), (
            f"{old} differs from what protoc makes of the .proto files: run `python -m serve.frontends.grpc.regenerate`"
        )


def test_every_proto_is_generated() -> None:
    names = {p.stem for p in regenerate.proto_files()}
    assert names == {"inference", "management", "grpc_predict_v2"}
