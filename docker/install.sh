#!/bin/sh
# The image's install steps, in one script that the Dockerfile runs and tests/e2e/test_dockerfile.py replays.
#
#   install.sh wheel   SRC WHEEL_DIR            builder stage: a wheel of serve from the sources in SRC
#   install.sh runtime VENV WHEEL_DIR VARIANT   runtime stage: VENV with that wheel and its runtime dependencies
#                                               only (VARIANT=gpu adds the `gpu` extra: CuPy; never torch)
#
# PYTHON picks the interpreter (default python3). pip's cache is whatever the environment says: the Dockerfile
# sets PIP_NO_CACHE_DIR=1, a test run keeps the cache so that repeat installs are fast.
set -eu
python=${PYTHON:-python3}

case "${1:-}" in
wheel)
    if "$python" -m pip --version >/dev/null 2>&1; then
        "$python" -m pip wheel --no-deps --wheel-dir "$3" "$2"
    else
        # Debian's python3 has no pip (a debootstrap base, docker/build_local.sh): a throwaway venv brings one
        build_venv=$(mktemp -d)
        "$python" -m venv "$build_venv"
        "$build_venv/bin/python" -m pip wheel --no-deps --wheel-dir "$3" "$2"
        rm -rf "$build_venv"
    fi
    ;;
runtime)
    venv=$2 wheels=$3 variant=${4:-cpu}
    case "$variant" in
    cpu) extra="" ;;
    gpu) extra="[gpu]" ;;
    *) echo "install.sh: VARIANT must be cpu or gpu, not '$variant'" >&2; exit 2 ;;
    esac
    set -- "$wheels"/serve-*.whl
    if [ "$#" -ne 1 ] || [ ! -f "$1" ]; then
        echo "install.sh: expected exactly one serve wheel in $wheels" >&2
        exit 2
    fi
    "$python" -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --upgrade pip
    "$venv/bin/python" -m pip install --quiet "$1$extra"
    # the runtime must never pull PyTorch (the whole point of the image's size)
    if "$venv/bin/python" -m pip show torch >/dev/null 2>&1; then
        echo "install.sh: torch ended up in $venv" >&2
        exit 1
    fi
    ;;
*)
    echo "usage: install.sh wheel SRC WHEEL_DIR | install.sh runtime VENV WHEEL_DIR [cpu|gpu]" >&2
    exit 2
    ;;
esac
