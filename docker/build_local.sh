#!/usr/bin/env bash
# Build serve's image on a local Debian base (no registry needed), run it and drive it; exit non-zero on any failure.
#
#   docker/build_local.sh                 # base image (once), serve's image, run + drive (docker/drive_image.py)
#   docker/build_local.sh --rebuild-base  # debootstrap the base again
#   docker/build_local.sh --no-build      # drive the image already built
#   docker/build_local.sh --no-build --model-store=DIR   # ... serving DIR's archives instead of the examples'
#
# Needs root, podman, debootstrap (Debian: apt-get install podman buildah debootstrap runc), a Debian mirror and PyPI
# (the image's pip installs), and the checkout's .venv (examples/build_model_store.py and the driver run there).
#
# Decisions:
# - The base is Debian bookworm's own python3 (3.11, like python:3.11-slim) from `debootstrap --variant=minbase`
#   plus python3-venv, without apt's caches and lists, manuals and translations (as debian:bookworm-slim), imported
#   with `podman import`: public registries cannot be pulled here. Both Dockerfile stages take it through
#   BUILDER_IMAGE and BASE_IMAGE; it is reused while it exists (--rebuild-base makes it again).
# - podman is probed before use: on sandboxes whose kernel has a hybrid cgroup v1/v2 layout crun refuses to start any
#   container ("cgroups in hybrid mode not supported"), and without CAP_SYS_RESOURCE podman's default rlimits
#   (nofile 1048576, above the hard limit) cannot be set; runc with explicit --ulimit values then works. The first flag
#   set below that runs `true` in the base is used for the build and the run, and printed.
# - The image is built with `--format docker` (OCI images drop HEALTHCHECK) and `--network host` (its RUN steps reach
#   the Debian mirror and PyPI without podman's bridge), at nice 10: the machine is shared. Where an egress proxy
#   re-signs TLS, the host's CA bundle is mounted for the RUN steps (never copied into a layer).
# - Figures: the image's size as podman reports it (its uncompressed layers, base included) and the cold start
#   (podman run to /ping 200, measured by the driver).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
WORK=${SERVE_IMAGE_WORK:-$ROOT/build/image}              # git-ignored
BASE=${SERVE_BASE_IMAGE:-localhost/serve-base:bookworm}
IMAGE=${SERVE_IMAGE:-localhost/serve:local}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
PYTHON=${SERVE_PYTHON:-$ROOT/.venv/bin/python}
rebuild_base=0 build=1 store=""
for arg in "$@"; do
    case "$arg" in
    --rebuild-base) rebuild_base=1 ;;
    --no-build) build=0 ;;
    --model-store=*) store=${arg#--model-store=} ;;
    *) echo "usage: $0 [--rebuild-base] [--no-build] [--model-store=DIR]" >&2; exit 2 ;;
    esac
done
for tool in podman debootstrap; do
    if ! command -v "$tool" >/dev/null; then
        echo "build_local.sh: $tool is missing (apt-get install podman debootstrap runc)" >&2
        exit 2
    fi
done
[ -x "$PYTHON" ] || { echo "build_local.sh: no $PYTHON (run make test or set SERVE_PYTHON)" >&2; exit 2; }
mkdir -p "$WORK"
step() { printf '\n== %s (%s)\n' "$1" "$(date -u +%H:%M:%S)"; }

# ---- 1. the base image: Debian's python3 from debootstrap ----
if [ "$rebuild_base" = 1 ] || ! podman image exists "$BASE"; then
    step "base image $BASE from debootstrap bookworm"
    rootfs="$WORK/rootfs"
    rm -rf "$rootfs"
    nice -n 10 debootstrap --variant=minbase --include=python3,python3-venv bookworm "$rootfs" "$MIRROR" \
        >"$WORK/debootstrap.log" 2>&1 || { tail -20 "$WORK/debootstrap.log" >&2; exit 1; }
    # slim as debian:bookworm-slim is: no manuals, docs (copyright kept) or translations, now or in later installs
    cat >"$rootfs/etc/dpkg/dpkg.cfg.d/serve-slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
EOF
    find "$rootfs/usr/share/doc" -type f ! -name copyright -delete
    rm -rf "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/usr/share/locale/*
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
    tar -C "$rootfs" --numeric-owner -c . | podman import --change 'CMD ["/bin/bash"]' - "$BASE" >/dev/null
    rm -rf "$rootfs"
fi

# ---- 2. how podman can run containers here ----
step "probing podman"
hard_nofile=$(ulimit -Hn)
[ "$hard_nofile" = unlimited ] && hard_nofile=1048576
# nproc: the shell's hard limit, capped at the kernel's pid_max (here runc's setrlimit was refused above it: 32768,
# with a hard limit of 96364); no more processes than that can exist anyway
nproc=$(ulimit -Hu)
pid_max=$(cat /proc/sys/kernel/pid_max)
if [ "$nproc" = unlimited ] || [ "$nproc" -gt "$pid_max" ]; then nproc=$pid_max; fi
ulimits="--ulimit nofile=$hard_nofile:$hard_nofile --ulimit nproc=$nproc:$nproc"
chosen=""
for flags in "||" "|$ulimits|" "--runtime runc|$ulimits|"; do   # global flags | run/build flags
    IFS='|' read -r global runflags _ <<<"$flags"
    # shellcheck disable=SC2086
    if out=$(timeout 120 podman $global run --rm $runflags "$BASE" true 2>&1); then
        chosen=$flags
        break
    fi
    echo "podman ${global:+$global }run ${runflags:+$runflags }... refused: $out"
done
[ -n "$chosen" ] || { echo "build_local.sh: podman cannot run a container on this machine (above)" >&2; exit 1; }
IFS='|' read -r global runflags _ <<<"$chosen"
echo "podman works with: global flags '${global}', run flags '${runflags}'"
export PODMAN_FLAGS="$global" PODMAN_RUN_FLAGS="$runflags"

# ---- 3. serve's image on that base ----
if [ "$build" = 1 ]; then
    step "building $IMAGE on $BASE"
    # An egress proxy that re-signs TLS (this sandbox's) needs the host's CA bundle: mounted for the RUN steps only,
    # with a pip.conf that names it, so nothing of it lands in a layer.
    bundle=${PIP_CERT:-${SSL_CERT_FILE:-/etc/ssl/certs/ca-certificates.crt}}
    ca_mounts=()
    if [ -f "$bundle" ]; then
        printf '[global]\ncert = /etc/serve-build-ca.crt\n' >"$WORK/pip.conf"
        ca_mounts=(-v "$bundle:/etc/serve-build-ca.crt:ro" -v "$WORK/pip.conf:/etc/pip.conf:ro")
    fi
    start=$(date +%s)
    # shellcheck disable=SC2086
    nice -n 10 podman $global build $runflags "${ca_mounts[@]}" --format docker --network host \
        --build-arg BUILDER_IMAGE="$BASE" --build-arg BASE_IMAGE="$BASE" -t "$IMAGE" -f "$ROOT/Dockerfile" "$ROOT" \
        >"$WORK/build.log" 2>&1 || { tail -40 "$WORK/build.log" >&2; exit 1; }
    echo "built in $(($(date +%s) - start)) s (log: $WORK/build.log)"
fi
size=$(podman image inspect --format '{{.Size}}' "$IMAGE")
base_size=$(podman image inspect --format '{{.Size}}' "$BASE")
echo "image size: $IMAGE $((size / 1000000)) MB ($((size / 1048576)) MiB)," \
    "of which the base $((base_size / 1048576)) MiB"

# ---- 4. the example models, then run the image and drive it ----
if [ -z "$store" ]; then
    step "example archives"
    store="$WORK/model_store"
    "$PYTHON" "$ROOT/examples/build_model_store.py" --model-store "$store" --build-dir "$WORK/examples"
fi
step "running and driving $IMAGE"
"$PYTHON" "$ROOT/docker/drive_image.py" --image "$IMAGE" --model-store "$store"
echo "build_local.sh: all checks passed"
