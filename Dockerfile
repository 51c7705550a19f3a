# syntax=docker/dockerfile:1
#
# The one image of shdh: every Kubeflow component runs in it, and so does the MLflow tracking
# server of k8s/ (which needs mlflow, boto3 and a PostgreSQL driver, all installed here).
#
# One image for CPU and GPU: torch==2.14.1 from PyPI is the CUDA build, and its wheels bring the
# CUDA runtime libraries with them (the nvidia-* pins of requirements.lock). On a GPU node the
# NVIDIA container toolkit mounts the driver; nothing else is needed, so there is no CUDA base
# image and no second Dockerfile. Build for linux/amd64: the lock pins x86_64 wheels.
#
# Build (docs/cluster.md):  docker build --platform linux/amd64 -t "$IMAGE" .
#
# The base is pinned by tag. For byte-for-byte rebuilds pin its digest as well: look it up with
#   docker buildx imagetools inspect python:3.11.14-slim-bookworm
# and write FROM python:3.11.14-slim-bookworm@sha256:<digest>. (It is not written here because
# it cannot be looked up from the machines this project is developed on.)
FROM python:3.11.14-slim-bookworm

# The package version (pyproject.toml) and the commit the image is built from.
ARG SHDH_VERSION=0.1.0
ARG VCS_REF=unknown

LABEL org.opencontainers.image.title="shdh" \
      org.opencontainers.image.description="Supervised Hierarchical Deep Hashing (arXiv 1704.02088): library, CLI, pipeline steps and MLflow server" \
      org.opencontainers.image.version="${SHDH_VERSION}" \
      org.opencontainers.image.revision="${VCS_REF}" \
      org.opencontainers.image.licenses="MIT" \
      org.opencontainers.image.base.name="docker.io/library/python:3.11.14-slim-bookworm"

# No bytecode or pip cache in the layers; logs unbuffered so `kubectl logs` streams them;
# matplotlib draws without a display and keeps its cache in /tmp, as numba keeps the compiled
# ranking kernel (the root filesystem is read-only in the pods of k8s/). SHDH_GIT_COMMIT tags every MLflow run with the image's commit
# (the image has no .git).
ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    MPLBACKEND=Agg \
    MPLCONFIGDIR=/tmp/matplotlib \
    NUMBA_CACHE_DIR=/tmp/numba \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility \
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

# Dependencies first, from the lock alone, so that this ~6 GB layer is rebuilt only when the
# lock changes. The extra pins: the MLflow server's PostgreSQL driver (the library never talks
# to PostgreSQL, so it is not in the lock) and the build backend of the package itself.
COPY requirements.lock /tmp/shdh/requirements.lock
RUN pip install --no-cache-dir --requirement /tmp/shdh/requirements.lock \
    && pip install --no-cache-dir --no-deps psycopg2-binary==2.9.13 setuptools==84.2.1

# The package, without dependencies (they are all above), then a smoke test of the CLI.
COPY pyproject.toml README.md /tmp/shdh/
COPY src /tmp/shdh/src
RUN pip install --no-cache-dir --no-deps --no-build-isolation /tmp/shdh \
    && rm -rf /tmp/shdh \
    && shdh --version

# No HEALTHCHECK: the components are batch jobs that exit when done, and Kubernetes ignores
# image health checks anyway; the MLflow server's probes are in k8s/base/mlflow.yaml.
USER 10001:10001
WORKDIR /workspace
CMD ["shdh", "--help"]
