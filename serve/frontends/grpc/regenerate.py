"""The ONE command that regenerates the gRPC stubs in `generated/` from the `.proto` files in `protos/`.

    python -m serve.frontends.grpc.regenerate            # rewrite serve/frontends/grpc/generated/*_pb2*.py[i]
    python -m serve.frontends.grpc.regenerate OUT_ROOT   # write them under OUT_ROOT/serve/frontends/grpc/generated

protoc's virtual include path `serve/frontends/grpc/generated=<protos dir>` makes the stubs import each other as
`serve.frontends.grpc.generated.*` (no sys.path tricks). tests/unit/frontends/grpc/test_generated.py regenerates into
a temporary folder and compares byte for byte, so a `.proto` edited without regenerating fails the tests.
Needs grpcio-tools (a test extra), imported only here.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTOS = HERE / "protos"
PACKAGE_DIR = "serve/frontends/grpc/generated"
REPO_ROOT = HERE.parents[2]


def proto_files() -> list[Path]:
    return sorted(PROTOS.glob("*.proto"))


def regenerate(out_root: Path = REPO_ROOT) -> list[Path]:
    """Run protoc on every `.proto`; the files it wrote (under out_root/serve/frontends/grpc/generated)."""
    import grpc_tools
    from grpc_tools import protoc

    out_root.mkdir(parents=True, exist_ok=True)
    well_known = Path(grpc_tools.__file__).parent / "_proto"  # google/protobuf/*.proto
    args = ["grpc_tools.protoc", f"-I{PACKAGE_DIR}={PROTOS}", f"-I{well_known}", f"--python_out={out_root}",
            f"--pyi_out={out_root}", f"--grpc_python_out={out_root}", *(str(p) for p in proto_files())]  # fmt: skip
    if protoc.main(args) != 0:
        raise RuntimeError(f"protoc failed on {[p.name for p in proto_files()]}: see its message above")
    return sorted(p for p in (out_root / PACKAGE_DIR).glob("*_pb2*") if p.is_file())


if __name__ == "__main__":
    for path in regenerate(Path(sys.argv[1]) if len(sys.argv) > 1 else REPO_ROOT):
        print(path)
