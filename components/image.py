"""The images the components run in, both built from the project's Dockerfile (docs/cluster.md).

One setting names them, SHDH_IMAGE: the runtime image as REGISTRY/NAME:TAG or by digest,
REGISTRY/NAME@sha256:DIGEST (default SHDH_IMAGE_REPOSITORY:VERSION, the repository being
ghcr.io/shdh/shdh, where CI pushes for a release tag). Every task runs in it, except the
train tasks of a cluster whose settings give them a GPU: those run in its CUDA variant, the same
name with GPU_TAG_SUFFIX after the tag (ghcr.io/shdh/shdh:0.2.0-cuda), which the Dockerfile's
`gpu` target builds and CI pushes beside it; for a runtime image named by digest, SHDH_GPU_IMAGE
names the CUDA one. The kustomize files name the same default
(k8s/base/kustomization.yaml, image `shdh`), and `shdh pipeline compile --image` sets it too.
"""

from __future__ import annotations

import os
import re

from shdh import __version__

IMAGE_ENV = "SHDH_IMAGE"
GPU_IMAGE_ENV = "SHDH_GPU_IMAGE"  # the CUDA image, where it cannot be derived (a digest)
REPOSITORY_ENV = "SHDH_IMAGE_REPOSITORY"  # REGISTRY/NAME of the default, tagged VERSION
PUBLIC_REPOSITORY = "ghcr.io/shdh/shdh"
REPOSITORY = os.environ.get(REPOSITORY_ENV) or PUBLIC_REPOSITORY
DEFAULT_IMAGE = f"{REPOSITORY}:{__version__}"
GPU_TAG_SUFFIX = "-cuda"
IMAGE = os.environ.get(IMAGE_ENV) or DEFAULT_IMAGE

# NAME[:PORT]/PATH, then :TAG (as Docker allows it), @sha256:DIGEST, or both.
_REFERENCE = re.compile(
    r"(?P<name>[a-z0-9][a-z0-9._/:-]*?)"
    r"(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?"
    r"(?:@(?P<digest>sha256:[0-9a-f]{64}))?"
)


def parse_image(image: str, source: str = IMAGE_ENV) -> tuple[str, str | None, str | None]:
    """(name, tag, digest) of REGISTRY/NAME:TAG, REGISTRY/NAME@sha256:DIGEST or both; anything
    else (no tag and no digest, a short digest) is refused, naming where it came from."""
    match = _REFERENCE.fullmatch(image)
    if (
        match is None
        or not (match["tag"] or match["digest"])
        or match["name"].endswith("/")
        or match["name"].endswith(":")
    ):
        raise ValueError(
            f"{source}={image!r}: expected REGISTRY/NAME:TAG or REGISTRY/NAME@sha256:DIGEST, "
            f"e.g. {DEFAULT_IMAGE} (the GPU image is the same name with the tag + "
            f"'{GPU_TAG_SUFFIX}', or {GPU_IMAGE_ENV} for a digest)"
        )
    return match["name"], match["tag"], match["digest"]


def split_image(image: str, source: str = IMAGE_ENV) -> tuple[str, str]:
    """(name, tag) of REGISTRY/NAME:TAG (a digest, if any, checked and left out)."""
    name, tag, digest = parse_image(image, source)
    return name, tag or ""


def gpu_image(image: str = IMAGE, gpu: str | None = None) -> str:
    """The CUDA variant of a runtime image: NAME:TAG -> NAME:TAG-cuda. A runtime image named by
    digest says nothing of its CUDA variant's digest, so that one is SHDH_GPU_IMAGE."""
    gpu = gpu if gpu is not None else os.environ.get(GPU_IMAGE_ENV)
    if gpu:
        parse_image(gpu)
        return gpu
    name, tag, digest = parse_image(image)
    if digest:
        raise ValueError(
            f"{IMAGE_ENV}={image!r} names the runtime image by digest: set {GPU_IMAGE_ENV} to "
            "the CUDA image (REGISTRY/NAME@sha256:DIGEST) for GPU training"
        )
    return f"{name}:{tag}{GPU_TAG_SUFFIX}"
