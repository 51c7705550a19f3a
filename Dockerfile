# syntax=docker/dockerfile:1
#
# The two images of shdh, from one file (docs/cluster.md, section 1):
#
#   --target runtime  ghcr.io/shdh/shdh:VERSION       every CPU step of the Kubeflow pipeline and
#                     the MLflow server of k8s/: Python 3.11, the package, its dependencies at
#                     the versions of requirements.lock, PyTorch's CPU build, psycopg2 for MLflow
#   --target gpu      ghcr.io/shdh/shdh:VERSION-cuda  the train step on NVIDIA GPUs: the same
#                     package on NVIDIA's CUDA 13.0 base, with the CUDA build of PyTorch of the lock
#
# Neither holds the test tools of the lock (pytest, ruff, faiss, seaweedfs, hadolint, the
# validators): only the package's own dependencies are installed, each at its locked version
# (`pip install --constraint requirements.lock`). Both run as the non-root user 10001.
#
# GPU nodes need an NVIDIA driver of release 580 or newer (CUDA 13.x; 580.65.06 shipped with
# CUDA 13.0) and a GPU of compute capability 7.5 (Turing) or newer: CUDA 13 dropped Maxwell,
# Pascal and Volta. On an older driver NVIDIA's container toolkit refuses the container where it
# checks the base image's NVIDIA_REQUIRE_CUDA, and the train step's device check fails at once
# where it does not.
#
# Base images are pinned by the digest of their multi-architecture index (amd64 is what the
# lock's wheels need; build with --platform linux/amd64). The digests were not pulled from the
# machines this project is developed on, which reach no registry; they are the ones published
# for these tags, as recorded in public repositories that build on them:
#   python:3.11.14-slim-bookworm          sha256:65a93d69... (amd64 manifest sha256:83f339c1...)
#   nvidia/cuda:13.0.3-base-ubuntu24.04   sha256:7c7413a5... (amd64 manifest sha256:97d085a7...)
#   ghcr.io/astral-sh/uv:0.9.16           sha256:ae9ff79d...
# Check one with `docker buildx imagetools inspect NAME:TAG` before bumping it.
#
# Build (CI does this for every pull request and pushes on a release tag: .github/workflows):
#   docker build --platform linux/amd64 --target runtime -t "$SHDH_IMAGE" .
#   docker build --platform linux/amd64 --target gpu -t "$SHDH_IMAGE-cuda" .

# ---- the package as a wheel, built once for both images ----------------------------------------
FROM python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d AS wheel

ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
COPY pyproject.toml README.md /src/shdh/
COPY src /src/shdh/src
# The build backend at a fixed version, without build isolation, so the build needs nothing
# that is not pinned here.
RUN pip install --no-cache-dir setuptools==84.2.1 \
    && pip wheel --no-cache-dir --no-deps --no-build-isolation --wheel-dir /wheels /src/shdh

# ---- uv, which installs the GPU image's Python ---------------------------------------------------
FROM ghcr.io/astral-sh/uv:0.9.16@sha256:ae9ff79d095a61faf534a882ad6378e8159d2ce322691153d68d2afac7422840 AS uv

# ---- runtime: the CPU steps and the MLflow server ------------------------------------------------
FROM python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d AS runtime

# The package version (pyproject.toml) and the locked torch and torchvision versions, whose CPU
# builds come from PyTorch's own index (tests/infra checks these against the two files).
ARG SHDH_VERSION=0.1.0
ARG TORCH_VERSION=2.14.1
ARG TORCHVISION_VERSION=0.29.1
ARG VCS_REF=unknown

LABEL org.opencontainers.image.title="shdh" \
      org.opencontainers.image.description="Supervised Hierarchical Deep Hashing (arXiv 1704.02088): CPU pipeline steps and the MLflow server" \
      org.opencontainers.image.version="${SHDH_VERSION}" \
      org.opencontainers.image.revision="${VCS_REF}" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.base.name="docker.io/library/python:3.11.14-slim-bookworm"

# No bytecode or pip cache in the layers; logs unbuffered so `kubectl logs` streams them;
# matplotlib draws without a display and keeps its cache in /tmp, as numba keeps the compiled
# ranking kernel (the root filesystem is read-only in the pods of k8s/). SHDH_GIT_COMMIT tags
# every MLflow run with the image's commit (the image has no .git).
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MPLBACKEND=Agg \
    MPLCONFIGDIR=/tmp/matplotlib \
    NUMBA_CACHE_DIR=/tmp/numba \
    SHDH_GIT_COMMIT=${VCS_REF}

# A fixed, numeric UID/GID (10001): the pods' securityContext names the same numbers, and
# Kubernetes can only verify runAsNonRoot for a numeric USER. /gcs, /minio and /s3 are where
# the Kubeflow Pipelines v2 launcher puts input artifacts; they must exist and be writable by a
# non-root user (the launcher cannot create directories under /). Group 0 gets the same rights
# so that clusters which assign an arbitrary UID in group 0 (OpenShift) work too.
RUN groupadd --system --gid 10001 shdh \
    && useradd --system --uid 10001 --gid 10001 --home-dir /home/shdh --create-home \
        --shell /usr/sbin/nologin shdh \
    && mkdir -p /workspace /gcs /minio /s3 \
    && chown 10001:0 /workspace /gcs /minio /s3 \
    && chmod 0775 /workspace /gcs /minio /s3

# PyTorch's CPU builds first (a quarter of the CUDA build's size, and no NVIDIA libraries),
# then the package with exactly the locked versions of its dependencies (the CPU torch already
# satisfies the lock's torch pin), then a smoke test of the CLI.
COPY requirements.lock /tmp/shdh/requirements.lock
COPY --from=wheel /wheels /tmp/shdh/wheels
RUN pip install --no-cache-dir --no-deps --index-url https://download.pytorch.org/whl/cpu \
        "torch==${TORCH_VERSION}+cpu" "torchvision==${TORCHVISION_VERSION}+cpu" \
    && pip install --no-cache-dir --constraint /tmp/shdh/requirements.lock \
        "/tmp/shdh/wheels/shdh-${SHDH_VERSION}-py3-none-any.whl[pipeline,server]" \
    && rm -rf /tmp/shdh \
    && shdh --version

# No HEALTHCHECK: the components are batch jobs that exit when done, and Kubernetes ignores
# image health checks anyway; the MLflow server's probes are in k8s/base/mlflow.yaml.
USER 10001:10001
WORKDIR /workspace
CMD ["shdh", "--help"]

# ---- gpu: the train step on NVIDIA GPUs ----------------------------------------------------------
# NVIDIA's smallest CUDA image: the CUDA runtime and the container settings of the NVIDIA
# toolkit (NVIDIA_REQUIRE_CUDA, NVIDIA_VISIBLE_DEVICES), no math libraries. cuBLAS, cuDNN, NCCL
# and the rest come with PyTorch as the nvidia-* wheels of the lock, at the versions it was
# built against; the `runtime` flavour would add a second copy (~2.5 GB) that torch never loads.
FROM nvidia/cuda:13.0.3-base-ubuntu24.04@sha256:7c7413a56200486f71f181cad9310f6fd31b6bb21816ade15fc9c1e1e927a5c1 AS gpu

ARG SHDH_VERSION=0.1.0
ARG PYTHON_VERSION=3.11.14
ARG VCS_REF=unknown

LABEL org.opencontainers.image.title="shdh-cuda" \
      org.opencontainers.image.description="Supervised Hierarchical Deep Hashing (arXiv 1704.02088): the train step on NVIDIA GPUs (CUDA 13, driver >= 580)" \
      org.opencontainers.image.version="${SHDH_VERSION}" \
      org.opencontainers.image.revision="${VCS_REF}" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.base.name="docker.io/nvidia/cuda:13.0.3-base-ubuntu24.04"

# The same Python as the runtime image, as a standalone build that uv installs and checks
# against the checksum it carries for it (Ubuntu 24.04's own Python is 3.12). The rest as in
# the runtime image.
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    UV_NO_CACHE=1 \
    UV_PYTHON_INSTALL_DIR=/opt/python \
    UV_PYTHON_PREFERENCE=only-managed \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:${PATH} \
    MPLBACKEND=Agg \
    MPLCONFIGDIR=/tmp/matplotlib \
    NUMBA_CACHE_DIR=/tmp/numba \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    SHDH_GIT_COMMIT=${VCS_REF}

RUN groupadd --system --gid 10001 shdh \
    && useradd --system --uid 10001 --gid 10001 --home-dir /home/shdh --create-home \
        --shell /usr/sbin/nologin shdh \
    && mkdir -p /workspace /gcs /minio /s3 \
    && chown 10001:0 /workspace /gcs /minio /s3 \
    && chmod 0775 /workspace /gcs /minio /s3

# Python and a virtual environment (the components call `python3 -m kfp.dsl.executor_main`, no
# pip), then the package with the locked dependencies: torch==2.14.1 from PyPI is the CUDA 13.0
# build and brings the nvidia-* libraries the lock pins.
COPY --from=uv /uv /usr/local/bin/uv
COPY requirements.lock /tmp/shdh/requirements.lock
COPY --from=wheel /wheels /tmp/shdh/wheels
RUN uv python install "${PYTHON_VERSION}" \
    && uv venv --python "${PYTHON_VERSION}" /opt/venv \
    && uv pip install --python /opt/venv/bin/python --constraint /tmp/shdh/requirements.lock \
        "/tmp/shdh/wheels/shdh-${SHDH_VERSION}-py3-none-any.whl[pipeline]" \
    && rm -rf /tmp/shdh \
    && shdh --version

USER 10001:10001
WORKDIR /workspace
CMD ["shdh", "--help"]
