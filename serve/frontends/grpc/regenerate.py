"""The ONE command that regenerates the gRPC stubs in `generated/` from the `.proto` files in `protos/`.

    python -m serve.frontends.grpc.regenerate            # rewrite serve/frontends/grpc/generated/*_pb2*.py[i]
    python -m serve.frontends.grpc.regenerate OUT_ROOT   # write them under OUT_ROOT/serve/frontends/grpc/generated

The stubs are generated with grpcio-tools GRPCIO_TOOLS (protobuf 6 gencode, PROTOBUF_GENCODE): protobuf's runtime
accepts gencode of its own major version up to its own minor, and protobuf 7's runtime accepts older gencode, so
these stubs run on protobuf 6.31+ and 7 alike (a user's tritonclient needs protobuf < 7), and on grpcio >= the
generating version. Stubs made by a newer grpcio-tools would demand its protobuf: `regenerate` refuses any
other grpcio-tools version (pip install grpcio-tools==GRPCIO_TOOLS in a venv of its own).

protoc's virtual include path `serve/frontends/grpc/generated=<protos dir>` makes the stubs import each other as
`serve.frontends.grpc.generated.*` (no sys.path tricks). tests/unit/frontends/grpc/test_generated.py regenerates into
a temporary folder and compares byte for byte (only the serialized descriptors with another grpcio-tools), so a
`.proto` edited without regenerating fails the tests.
Needs grpcio-tools (a test extra), imported only here.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PROTOS = HERE / "protos"
PACKAGE_DIR = "serve/frontends/grpc/generated"
REPO_ROOT = HERE.parents[2]
GRPCIO_TOOLS = "1.73.1"
PROTOBUF_GENCODE = "6.31.0"  # what GRPCIO_TOOLS's protoc writes: the oldest protobuf runtime the stubs accept


def proto_files() -> list[Path]:
    return sorted(PROTOS.glob("*.proto"))


def tools_version() -> str:
    from importlib.metadata import version

    return version("grpcio-tools")


def regenerate(out_root: Path = REPO_ROOT, any_version: bool = False) -> list[Path]:
    """Run protoc on every `.proto`; the files it wrote (under out_root/serve/frontends/grpc/generated). Only with
    grpcio-tools GRPCIO_TOOLS, unless `any_version` (the test that compares descriptors)."""
    import grpc_tools
    from grpc_tools import protoc

    if not any_version and tools_version() != GRPCIO_TOOLS:
        raise RuntimeError(f"grpcio-tools {tools_version()} is installed; the stubs are generated with "
                           f"grpcio-tools=={GRPCIO_TOOLS} so that they run on protobuf {PROTOBUF_GENCODE} and later: "
                           f"install that version in a venv of its own and run this module there")  # fmt: skip

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
