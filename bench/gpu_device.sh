#!/usr/bin/env bash
# The one command to give the `device` tool's `run` (carry: [".whl"]) on the GPU machine, at the repository root:
#
#     bash bench/gpu_device.sh all       # environment, then the GPU tests, then bench/gpu.py (fits one 10-minute call)
#     bash bench/gpu_device.sh tests     # environment and pytest tests/gpu tests/unit/backend only
#     bash bench/gpu_device.sh bench     # environment and the full bench/gpu.py only
#     bash bench/gpu_device.sh quick     # environment and bench/gpu.py --quick
#     bash bench/gpu_device.sh tests tests/gpu/test_layers.py -k conv    # arguments after the stage go to pytest
#     bash bench/gpu_device.sh bench --models minilm --dtypes float16    # ... or to bench/gpu.py
#
# It installs the wheels that bench/gpu_wheels.sh put in .whl/ into /tmp/site (grpcio and protobuf only when the
# machine's own are older than the generated gRPC stubs need), puts /tmp/site and the repository on PYTHONPATH, and
# writes its logs under $OUT (env.log, pytest.log, junit.xml, bench.log, bench.md), which the tool brings back.
# Each stage runs under its own time limit (TESTS_S, BENCH_S seconds) so that `all` ends inside the call's limit
# with its logs written.
set -uo pipefail
cd "$(dirname "$0")/.."
STAGE=${1:-all}
shift || true
OUT=${OUT:-/tmp/serve-gpu-out}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1 PYTHONDONTWRITEBYTECODE=1

case "$STAGE" in
    all) TESTS_S=${TESTS_S:-290} BENCH_S=${BENCH_S:-270} ;;
    tests) TESTS_S=${TESTS_S:-560} ;;
    bench | quick) BENCH_S=${BENCH_S:-560} ;;
    *) echo "usage: bash bench/gpu_device.sh [all|tests|bench|quick] [arguments for pytest or bench/gpu.py]" >&2
       exit 2 ;;
esac

# ---- wheels -------------------------------------------------------------------------------------------------
if compgen -G ".whl/*.whl" >/dev/null; then
    # grpcio / protobuf: only when the installed ones are missing or older than the generated stubs require
    skip=$($PY - <<'EOF'
from importlib import metadata
from packaging.version import Version
need = {"grpcio": "1.85.1", "protobuf": "7.35.1"}
for name, least in need.items():
    try:
        if Version(metadata.version(name)) >= Version(least):
            print(name)
    except metadata.PackageNotFoundError:
        pass
EOF
)
    wheels=()
    for w in .whl/*.whl; do
        project=$(basename "$w" | cut -d- -f1)
        if grep -qx "$project" <<<"$skip"; then continue; fi
        wheels+=("$w")
    done
    $PY -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site "${wheels[@]}" \
        || { echo "installing .whl/ into /tmp/site failed" >&2; exit 1; }
    echo "installed into /tmp/site: ${wheels[*]}" | tee "$OUT/env.log"
    echo "kept the machine's own: ${skip//$'\n'/ }" | tee -a "$OUT/env.log"
else
    echo "no .whl/ here: run bench/gpu_wheels.sh on a machine with network access and carry .whl" | tee "$OUT/env.log"
fi
export PYTHONPATH=/tmp/site:$PWD${PYTHONPATH:+:$PYTHONPATH}

# ---- environment --------------------------------------------------------------------------------------------
{
    nvidia-smi
    $PY - <<'EOF'
import platform, sys
print("python", platform.python_version(), sys.executable)
import numpy, ml_dtypes
print("numpy", numpy.__version__, "ml_dtypes", ml_dtypes.__version__)
try:
    import cupy
    print("cupy", cupy.__version__, "CUDA runtime", cupy.cuda.runtime.runtimeGetVersion(),
          "driver", cupy.cuda.runtime.driverGetVersion(), "devices", cupy.cuda.runtime.getDeviceCount())
except Exception as e:
    print("cupy: not usable:", type(e).__name__, e)
try:
    import torch
    print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())
except Exception as e:
    print("torch: not usable:", type(e).__name__, e)
import serve, serve.cuda
print("serve", serve.__version__, "from", serve.__file__, "cuda available", serve.cuda.is_available())
import fastapi, grpc, google.protobuf, pydantic
print("fastapi", fastapi.__version__, "pydantic", pydantic.VERSION, "grpcio", grpc.__version__,
      "protobuf", google.protobuf.__version__)
EOF
} 2>&1 | tee -a "$OUT/env.log"

# ---- stages -------------------------------------------------------------------------------------------------
rc=0
if [[ $STAGE == all || $STAGE == tests ]]; then
    targets=(tests/gpu tests/unit/backend)
    if [[ $STAGE == tests && $# -gt 0 ]]; then targets=("$@"); fi
    timeout -k 10 "$TESTS_S" $PY -m pytest "${targets[@]}" -q -rfEs -p no:cacheprovider --timeout 120 \
        --durations 15 --junitxml "$OUT/junit.xml" 2>&1 | tee "$OUT/pytest.log"
    rc=${PIPESTATUS[0]}
    echo "pytest exit status $rc (124: stopped at TESTS_S=$TESTS_S seconds)" | tee -a "$OUT/pytest.log"
fi
if [[ $STAGE == all || $STAGE == bench || $STAGE == quick ]]; then
    extra=()
    if [[ $STAGE == quick ]]; then extra=(--quick); fi
    if [[ $STAGE != all ]]; then extra+=("$@"); fi
    timeout -k 10 "$BENCH_S" $PY bench/gpu.py --markdown "$OUT/bench.md" "${extra[@]}" 2>&1 | tee "$OUT/bench.log"
    brc=${PIPESTATUS[0]}
    echo "bench/gpu.py exit status $brc (124: stopped at BENCH_S=$BENCH_S seconds)" | tee -a "$OUT/bench.log"
    if [[ $rc == 0 ]]; then rc=$brc; fi
fi
exit "$rc"
