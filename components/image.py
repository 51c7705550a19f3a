"""The images the components run in, both built from the project's Dockerfile (docs/cluster.md).

One setting names them, SHDH_IMAGE: the runtime image as REGISTRY/NAME:TAG (default
ghcr.io/shdh/shdh:VERSION, what CI pushes for a release tag). Every task runs in it, except the
train tasks of a cluster whose settings give them a GPU: those run in its CUDA variant, the same
name with GPU_TAG_SUFFIX after the tag (ghcr.io/shdh/shdh:0.1.0-cuda), which the Dockerfile's
`gpu` target builds and CI pushes beside it. The kustomize files name the same default
(k8s/base/kustomization.yaml, image `shdh`), and `shdh pipeline compile --image` sets it too.
"""

from __future__ import annotations

import os
import re

from shdh import __version__

IMAGE_ENV = "SHDH_IMAGE"
REPOSITORY = "ghcr.io/shdh/shdh"
DEFAULT_IMAGE = f"{REPOSITORY}:{__version__}"
GPU_TAG_SUFFIX = "-cuda"
IMAGE = os.environ.get(IMAGE_ENV) or DEFAULT_IMAGE

# NAME[:PORT]/PATH:TAG, the tag as Docker allows it; a digest cannot take the GPU suffix.
_REFERENCE = re.compile(
    r"(?P<name>[a-z0-9][a-z0-9._/:-]*?)(?::(?P<tag>[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))"
)


def split_image(image: str) -> tuple[str, str]:
    """(name, tag) of REGISTRY/NAME:TAG; anything else is refused, naming the setting."""
    match = _REFERENCE.fullmatch(image)
    if match is None or "@" in image or match["name"].endswith("/"):
        raise ValueError(
            f"{IMAGE_ENV}={image!r}: expected REGISTRY/NAME:TAG, e.g. {DEFAULT_IMAGE} "
            f"(the GPU image is the same name with the tag + '{GPU_TAG_SUFFIX}')"
        )
    return match["name"], match["tag"]


def gpu_image(image: str = IMAGE) -> str:
    """The CUDA variant of a runtime image: NAME:TAG -> NAME:TAG-cuda."""
    name, tag = split_image(image)
    return f"{name}:{tag}{GPU_TAG_SUFFIX}"
