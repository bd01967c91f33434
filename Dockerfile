# syntax=docker/dockerfile:1
# gpu-goodput-exporter image. scripts/image.sh (make image) builds it with docker, podman or
# buildah, whichever is there; by hand:
#   docker build -t gpu-goodput-exporter .                      # standard (NVML + GPM), default
#   docker build --build-arg EXTRAS=kubernetes -t ... .         # + serving pod discovery
#   docker build --target dcgm -t gpu-goodput-exporter:dcgm .   # + NVIDIA DCGM libraries/bindings
# Run with the NVIDIA container runtime (--runtime=nvidia or --gpus all); the image asks for
# every GPU with the "utility" driver capability only (NVML, no CUDA).
# HEALTHCHECK is a Docker-format instruction: build with --format docker under podman/buildah
# (scripts/image.sh does), OCI images drop it. Kubernetes ignores it either way (the chart
# has its own probes).

# Exact patch version of the base; bump deliberately (and the digest, if you pin one).
ARG PYTHON_IMAGE=python:3.12.12-slim-bookworm
# What the venv is copied onto: the same Python as PYTHON_IMAGE at the same path, without pip.
# Defaults to the same image; CI passes a pip-less Debian base (scripts/image.sh --debian-base).
ARG RUNTIME_IMAGE=python:3.12.12-slim-bookworm
# NVIDIA's DCGM image, only read by the dcgm target for its libraries and Python bindings.
ARG DCGM_IMAGE=nvcr.io/nvidia/cloud-native/dcgm:4.2.3-1-ubuntu22.04

# ---- build: install the package into a venv; nothing of this stage ships but the venv ----
FROM ${PYTHON_IMAGE} AS build
# Optional extras, e.g. "kubernetes" (serving pod discovery, +81 MB): empty = runtime deps only.
ARG EXTRAS=""
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
WORKDIR /src
COPY pyproject.toml README.md ./
COPY exporter ./exporter
# The venv has no pip of its own: the build stage's pip installs into it. The bytecode is
# compiled once here, since the root filesystem is read-only at run time.
RUN python -m venv --without-pip /opt/venv \
    && python -m pip --python /opt/venv/bin/python install --no-cache-dir --no-compile \
       ".${EXTRAS:+[$EXTRAS]}" \
    && /opt/venv/bin/python -m compileall -q /opt/venv/lib

# ---- dcgm-libs: DCGM's shared libraries and Python bindings, collected arch-independently ----
FROM ${DCGM_IMAGE} AS dcgm-libs
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
RUN mkdir -p /out/lib /out/bindings \
    && cp -a /usr/lib/*-linux-gnu/libdcgm* /out/lib/ \
    && { cp -a /usr/lib/*-linux-gnu/libnvperf_dcgm_host* /out/lib/ 2>/dev/null || true; } \
    && cp -a /usr/share/datacenter-gpu-manager-4/bindings/python3/. /out/bindings/

# ---- runtime: what both variants share ----
FROM ${RUNTIME_IMAGE} AS runtime
# scripts/image.sh passes the version from exporter/__init__.py, the git revision, the time
# and the repository URL (git remote origin; empty when there is none).
ARG VERSION=0.1.0
ARG REVISION=unknown
ARG CREATED=unknown
ARG SOURCE=""
LABEL org.opencontainers.image.title="gpu-goodput-exporter" \
      org.opencontainers.image.description="Prometheus exporter that tells whether GPUs do useful work" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.source="${SOURCE}"
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=utility
# nobody:nogroup, numeric so Kubernetes' runAsNonRoot can verify it.
USER 65534:65534
EXPOSE 9433
HEALTHCHECK --interval=30s --timeout=5s --start-period=10s --retries=3 \
    CMD ["python", "-m", "exporter.web.healthcheck"]
ENTRYPOINT ["gpu-goodput-exporter"]

# ---- dcgm: runtime + DCGM, for profiling.mode=dcgm ----
FROM runtime AS dcgm
COPY --from=dcgm-libs /out/lib/ /usr/local/lib/dcgm/
COPY --from=dcgm-libs /out/bindings/ /usr/local/share/dcgm/bindings/python3/
ENV LD_LIBRARY_PATH=/usr/local/lib/dcgm \
    GOODPUT_PROFILING__DCGM_LIBRARY_PATH=/usr/local/lib/dcgm \
    GOODPUT_PROFILING__DCGM_BINDINGS_PATH=/usr/local/share/dcgm/bindings/python3

# ---- standard: the default target (last stage) ----
FROM runtime AS standard
