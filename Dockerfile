# syntax=docker/dockerfile:1
# serve: a model server on its own numpy runtime (no PyTorch, no JVM).
#
#   docker build -t serve:latest .                                   # CPU (python:3.11-slim)
#   docker build -t serve:latest-gpu --build-arg VARIANT=gpu \
#       --build-arg BASE_IMAGE=nvidia/cuda:12.4.1-runtime-ubuntu22.04 .   # GPU (CUDA runtime + the `gpu` extra)
#   docker run --rm -p 8080-8082:8080-8082 -p 7070-7071:7070-7071 \
#       -v "$PWD/model_store:/home/model-server/model-store:ro" serve:latest
#   docker/build_local.sh                      # no registry: a Debian base from debootstrap, built, run and driven
#
# Both stages take their base from a build argument (BUILDER_IMAGE, BASE_IMAGE), so a local base works: any
# Debian-like image with python3 (3.11), its venv module and apt; docker/build_local.sh passes one made by debootstrap.
# The install steps live in docker/install.sh, which tests/e2e/test_dockerfile.py replays in a fresh venv.

ARG BUILDER_IMAGE=python:3.11-slim
ARG BASE_IMAGE=python:3.11-slim

# ---- builder: a wheel of serve with its native CPU kernels compiled in (the image never sees the sources) ----
FROM ${BUILDER_IMAGE} AS builder
# gcc builds serve's native kernels (setup.py); the runtime stage gets only the compiled libraries in the wheel
RUN apt-get update && \
    DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends gcc libc6-dev && \
    rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY pyproject.toml setup.py README.md ./
COPY serve ./serve
COPY handlers ./handlers
COPY docker/install.sh /usr/local/bin/serve-install
RUN PIP_NO_CACHE_DIR=1 serve-install wheel /src /wheels

# ---- runtime: the venv with serve and its runtime dependencies, run as a non-root user ----
FROM ${BASE_IMAGE} AS runtime
# cpu: python:3.11-slim. gpu: an nvidia/cuda *runtime* base (pass BASE_IMAGE) plus CuPy from the `gpu` extra.
ARG VARIANT=cpu
ARG UID=1000

# The CUDA base images carry no Python: install 3.11 (Ubuntu 22.04 ships it) for the gpu variant only.
SHELL ["/bin/sh", "-eu", "-c"]
RUN if [ "$VARIANT" = gpu ]; then \
        apt-get update; \
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3.11 python3.11-venv; \
        rm -rf /var/lib/apt/lists/*; \
    fi; \
    groupadd --gid "$UID" model-server; \
    useradd --create-home --home-dir /home/model-server --uid "$UID" --gid "$UID" --shell /bin/false model-server; \
    mkdir -p /home/model-server/model-store /home/model-server/logs; \
    chown -R model-server:model-server /home/model-server

COPY --from=builder /wheels /tmp/wheels
COPY docker/install.sh /usr/local/bin/serve-install
RUN if [ "$VARIANT" = gpu ]; then export PYTHON=python3.11; fi; \
    PIP_NO_CACHE_DIR=1 serve-install runtime /opt/serve "/tmp/wheels" "$VARIANT"; \
    rm -rf /tmp/wheels

COPY --chown=${UID}:${UID} docker/config.properties /home/model-server/config.properties

ENV PATH=/opt/serve/bin:$PATH \
    PYTHONUNBUFFERED=1 \
    TS_CONFIG_FILE=/home/model-server/config.properties

# numeric, so that Kubernetes can check runAsNonRoot
USER ${UID}:${UID}
# key_file.json, logs/ and snapshots are written to the working directory
WORKDIR /home/model-server
VOLUME ["/home/model-server/model-store"]
# inference, management, metrics (HTTP); gRPC inference (+ KServe v2), gRPC management
EXPOSE 8080 8081 8082 7070 7071

HEALTHCHECK --interval=30s --timeout=5s --start-period=30s --retries=3 \
    CMD ["python", "-c", "import urllib.request; urllib.request.urlopen('http://127.0.0.1:8080/ping', timeout=4)"]

# SIGTERM drains the listeners and the workers (give `docker stop` a long enough --time)
STOPSIGNAL SIGTERM
ENTRYPOINT ["serve", "start", "--foreground", "--model-store", "/home/model-server/model-store"]
CMD []
