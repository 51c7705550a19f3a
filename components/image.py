"""The one image every component runs in: the project's Dockerfile, tagged by package version.

Set SHDH_IMAGE before compiling (or `shdh pipeline compile --image`) to use an image pushed to
another registry or tag; the compiled YAML then names that image in every task.
"""

from __future__ import annotations

import os

from shdh import __version__

IMAGE_ENV = "SHDH_IMAGE"
DEFAULT_IMAGE = f"ghcr.io/shdh/shdh:{__version__}"
IMAGE = os.environ.get(IMAGE_ENV) or DEFAULT_IMAGE
