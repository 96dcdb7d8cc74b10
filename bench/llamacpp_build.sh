#!/usr/bin/env bash
# llama.cpp's llama-server, the generative benchmark's CPU anchor (issue 25, "Measure"), built from the source the
# llama-cpp-python sdist vendors, into the git-ignored bench/out/llamacpp/:
#
#     bash bench/llamacpp_build.sh            # then: .venv/bin/python bench/generation.py --llamacpp bench/out/llamacpp
#
# Decisions:
# - The sdist from PyPI (`pip download --no-binary :all: --no-deps`), not a git clone: the issue names it, and its
#   version pins one llama.cpp commit (vendor/llama.cpp). A LLAMACPP_PY_VERSION=x.y.z pins the sdist itself.
# - CPU only, Release, GGML_NATIVE (the build machine's ISA: AVX-512/BF16 where present, as serve's kernels use),
#   static libraries (one self-contained binary), no libcurl (models are local files), only the llama-server target:
#   2 cores take minutes.
# - The converter (vendor/llama.cpp/convert_hf_to_gguf.py) runs on the project's venv python with PYTHONPATH at the
#   vendored gguf-py: it needs numpy, pyyaml, tqdm, torch and transformers, which that venv already has, so nothing
#   is installed anywhere (bench/generation.py's llama.cpp part does the conversion).
# - Idempotent: a finished step (sdist, unpacked tree, binary) is not redone. The paths are written to
#   bench/out/llamacpp/build.json for bench/generation.py.
set -euo pipefail

BENCH="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ROOT="$(dirname "$BENCH")"
OUT="$BENCH/out/llamacpp"
PY="${PYTHON:-$ROOT/.venv/bin/python}"
JOBS="${JOBS:-2}"
mkdir -p "$OUT/sdist"

spec="llama-cpp-python${LLAMACPP_PY_VERSION:+==$LLAMACPP_PY_VERSION}"
if ! ls "$OUT"/sdist/llama_cpp_python-*.tar.gz >/dev/null 2>&1; then
    echo "== pip download $spec (sdist)"
    "$PY" -m pip download --no-binary :all: --no-deps --dest "$OUT/sdist" "$spec"
fi
sdist="$(ls "$OUT"/sdist/llama_cpp_python-*.tar.gz | sort -V | tail -1)"
name="$(basename "$sdist" .tar.gz)"
src="$OUT/$name"
if [ ! -f "$src/vendor/llama.cpp/CMakeLists.txt" ]; then
    echo "== unpack $sdist"
    tar -xzf "$sdist" -C "$OUT"
fi
llama="$src/vendor/llama.cpp"
build="$OUT/build"
server="$build/bin/llama-server"
if [ ! -x "$server" ]; then
    echo "== cmake configure ($llama)"
    cmake -S "$llama" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON -DBUILD_SHARED_LIBS=OFF \
        -DLLAMA_CURL=OFF -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DGGML_OPENMP=ON
    echo "== cmake build llama-server (-j $JOBS)"
    cmake --build "$build" --target llama-server -j "$JOBS"
fi
"$server" --version 2>&1 | tail -n 3 || true

echo "== converter check (project venv python + vendored gguf-py, nothing installed)"
PYTHONPATH="$llama/gguf-py" "$PY" -c "import gguf, numpy, torch, transformers; print('gguf', gguf.__file__)"

"$PY" - "$OUT/build.json" "$name" "$server" "$llama" <<'EOF'
import json, sys
out, name, server, llama = sys.argv[1:]
json.dump({"sdist": name, "server": server, "convert": f"{llama}/convert_hf_to_gguf.py",
           "gguf_py": f"{llama}/gguf-py"}, open(out, "w"), indent=1)
print("wrote", out)
EOF
