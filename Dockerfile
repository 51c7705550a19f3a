# The two images of shdh, from one file (docs/cluster.md, section 1):
#
#   --target runtime  ghcr.io/shdh/shdh:VERSION       every CPU step of the Kubeflow pipeline and
#                     the MLflow server of k8s/: Python 3.11, the package, its dependencies at
#                     the versions of requirements.lock, psycopg2 for MLflow
#   --target gpu      ghcr.io/shdh/shdh:VERSION-cuda  the train step on NVIDIA GPUs: the same
#                     package with the CUDA build of PyTorch of the lock and its nvidia-* libraries
#
# Build it with `make images` (tools/images.py), here and in CI. The build needs no network
# and no registry: every Python package comes from a wheelhouse made on the host beforehand
# (WHEELHOUSE: the package's wheel and the wheels of its own dependencies at the versions of
# requirements.lock), installed with `pip install --no-index --constraint requirements.lock`,
# so none of the lock's test tools (pytest, ruff, faiss, seaweedfs, hadolint, the validators) go
# in. Which PyTorch build an image gets is the wheelhouse's: the lock's torch 2.14.1 (the CUDA
# build from PyPI, which runs on the CPU too), or for the runtime image the CPU build of the
# same release where the wheelhouse has one under cpu/ (CI fetches it from PyTorch's CPU index).
# Both images run as the non-root user 10001.
#
# The bases are build arguments. Their defaults are the public base, pinned by the digest of its
# multi-architecture index (amd64 is what the lock's wheels need: build with --platform
# linux/amd64); check one with `docker buildx imagetools inspect NAME:TAG` before bumping it:
#   python:3.11.14-slim-bookworm   sha256:65a93d69... (amd64 manifest sha256:83f339c1...)
# Where no registry is reachable, `make images` passes a base it made with debootstrap (Debian
# bookworm minbase with Debian's Python 3.11); any base works that has `python3` 3.11 with its
# venv module, glibc 2.28 or newer, and useradd.
#
# The GPU image needs no CUDA base: PyTorch's wheels bring the CUDA runtime, cuBLAS, cuDNN and
# NCCL as the nvidia-* wheels of the lock, and NVIDIA's container toolkit mounts the driver into
# any image whose environment asks for it (NVIDIA_VISIBLE_DEVICES, set by the device plugin, and
# NVIDIA_DRIVER_CAPABILITIES); NVIDIA_REQUIRE_CUDA makes the toolkit refuse a node whose driver
# is older than CUDA 13.0 needs (release 580 or newer). GPUs of compute capability 7.5 (Turing)
# or newer: CUDA 13 dropped Maxwell, Pascal and Volta.

ARG RUNTIME_BASE=python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d
ARG GPU_BASE=python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d

# ---- the runtime image's virtual environment, from the wheelhouse ------------------------------
FROM ${RUNTIME_BASE} AS venv

ARG SHDH_VERSION=0.2.0
ARG WHEELHOUSE=artifacts/wheelhouse
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
COPY requirements.lock /tmp/shdh/requirements.lock
COPY ${WHEELHOUSE}/deps /tmp/shdh/wheels
# The package's own requirements (top-level.txt: what `shdh[pipeline,server]` asks for),
# resolved among the wheelhouse's wheels with the lock as constraints. cpu/ first: pip takes
# 2.14.1+cpu over 2.14.1 for torch==2.14.1 when both are there, and then no nvidia-* wheel.
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-index --find-links /tmp/shdh/wheels/cpu \
        --find-links /tmp/shdh/wheels --constraint /tmp/shdh/requirements.lock \
        --requirement /tmp/shdh/wheels/top-level.txt

# ---- runtime: the CPU steps and the MLflow server ----------------------------------------------
FROM ${RUNTIME_BASE} AS runtime

ARG SHDH_VERSION=0.2.0

# No bytecode written at run time; logs unbuffered so `kubectl logs` streams them; matplotlib
# draws without a display and keeps its cache in /tmp, as numba keeps the compiled ranking
# kernel and evaluate its caches of codes and scores (the root filesystem is read-only in the
# pods of k8s/; mount a volume at /tmp/shdh to keep them between pods). SHDH_GIT_COMMIT (at the
# end) tags every MLflow run with the image's commit (the image has no .git).
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    MPLBACKEND=Agg \
    MPLCONFIGDIR=/tmp/matplotlib \
    NUMBA_CACHE_DIR=/tmp/numba \
    SHDH_CACHE_DIR=/tmp/shdh

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

COPY --from=venv /opt/venv /opt/venv
# A login shell (`bash -lc`, how the Kubeflow SDK starts a TrainJob's nodes in containers) gets
# its PATH from Debian's /etc/profile, which would hide the venv's python and torchrun.
RUN echo "export PATH=/opt/venv/bin:\$PATH" > /etc/profile.d/shdh-venv.sh
# The package last, in its own small layer: a change of the sources rebuilds only this.
ARG WHEELHOUSE=artifacts/wheelhouse
COPY ${WHEELHOUSE}/shdh /tmp/shdh
RUN /opt/venv/bin/pip install --no-index --no-deps "/tmp/shdh/shdh-${SHDH_VERSION}-py3-none-any.whl" \
    && /opt/venv/bin/pip check \
    && rm -rf /tmp/shdh \
    && shdh --version

# No HEALTHCHECK: the components are batch jobs that exit when done, and Kubernetes ignores
# image health checks anyway; the MLflow server's probes are in k8s/base/mlflow.yaml.
# The commit and the labels last: a new commit changes only these layers, not the ones above
# (an ARG takes part in the cache key of every RUN after it).
ARG VCS_REF=unknown
ARG BASE_NAME=docker.io/library/python:3.11.14-slim-bookworm
LABEL org.opencontainers.image.title="shdh" \
      org.opencontainers.image.description="Supervised Hierarchical Deep Hashing (arXiv 1704.02088): CPU pipeline steps and the MLflow server" \
      org.opencontainers.image.version="${SHDH_VERSION}" \
      org.opencontainers.image.revision="${VCS_REF}" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.base.name="${BASE_NAME}"
ENV SHDH_GIT_COMMIT=${VCS_REF}

USER 10001:10001
WORKDIR /workspace
CMD ["shdh", "--help"]

# ---- the GPU image's virtual environment: the lock's CUDA build of PyTorch ---------------------
FROM ${GPU_BASE} AS venv-gpu

ARG SHDH_VERSION=0.2.0
ARG WHEELHOUSE=artifacts/wheelhouse
ENV PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PYTHONDONTWRITEBYTECODE=1
COPY requirements.lock /tmp/shdh/requirements.lock
COPY ${WHEELHOUSE}/deps /tmp/shdh/wheels
RUN python3 -m venv /opt/venv \
    && /opt/venv/bin/pip install --no-index --find-links /tmp/shdh/wheels \
        --constraint /tmp/shdh/requirements.lock --requirement /tmp/shdh/wheels/top-level.txt

# ---- gpu: the train step on NVIDIA GPUs --------------------------------------------------------
FROM ${GPU_BASE} AS gpu

ARG SHDH_VERSION=0.2.0

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    VIRTUAL_ENV=/opt/venv \
    PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    MPLBACKEND=Agg \
    MPLCONFIGDIR=/tmp/matplotlib \
    NUMBA_CACHE_DIR=/tmp/numba \
    NVIDIA_VISIBLE_DEVICES=all \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
    NVIDIA_REQUIRE_CUDA="cuda>=13.0"

RUN groupadd --system --gid 10001 shdh \
    && useradd --system --uid 10001 --gid 10001 --home-dir /home/shdh --create-home \
        --shell /usr/sbin/nologin shdh \
    && mkdir -p /workspace /gcs /minio /s3 \
    && chown 10001:0 /workspace /gcs /minio /s3 \
    && chmod 0775 /workspace /gcs /minio /s3

COPY --from=venv-gpu /opt/venv /opt/venv
# A login shell (`bash -lc`, how the Kubeflow SDK starts a TrainJob's nodes in containers) gets
# its PATH from Debian's /etc/profile, which would hide the venv's python and torchrun.
RUN echo "export PATH=/opt/venv/bin:\$PATH" > /etc/profile.d/shdh-venv.sh
# The package last, in its own small layer: a change of the sources rebuilds only this.
ARG WHEELHOUSE=artifacts/wheelhouse
COPY ${WHEELHOUSE}/shdh /tmp/shdh
RUN /opt/venv/bin/pip install --no-index --no-deps "/tmp/shdh/shdh-${SHDH_VERSION}-py3-none-any.whl" \
    && /opt/venv/bin/pip check \
    && rm -rf /tmp/shdh \
    && shdh --version

# The commit and the labels last: a new commit changes only these layers, not the ones above
# (an ARG takes part in the cache key of every RUN after it).
ARG VCS_REF=unknown
ARG BASE_NAME=docker.io/library/python:3.11.14-slim-bookworm
LABEL org.opencontainers.image.title="shdh-cuda" \
      org.opencontainers.image.description="Supervised Hierarchical Deep Hashing (arXiv 1704.02088): the train step on NVIDIA GPUs (CUDA 13, driver >= 580)" \
      org.opencontainers.image.version="${SHDH_VERSION}" \
      org.opencontainers.image.revision="${VCS_REF}" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.base.name="${BASE_NAME}"
ENV SHDH_GIT_COMMIT=${VCS_REF}

USER 10001:10001
WORKDIR /workspace
CMD ["shdh", "--help"]
