"""Uploaded images -> the uint8 arrays an encoder takes, converted exactly as the pipeline
converts a dataset's image files (shdh.data.images.decode_image: EXIF orientation, colour mode,
bilinear stretch to the trained size), so a query image and a database image of the same picture
get the same code.

The header is read first (Pillow reads no pixels on open), so the format and the pixel
dimensions are checked before anything is decoded: a small file that claims a huge image (a
decompression bomb) is refused without allocating it. Everything happens in memory.
"""

from __future__ import annotations

import io
import re

import numpy as np
from PIL import Image

from shdh.data.images import ImageDecodeError, ImageSpec, decode_image
from shdh.serving.limits import Limits

CONTENT_TYPES = {"image/png": "PNG", "image/jpeg": "JPEG"}

# Pillow names the file it could not read by its repr, which for bytes in memory is an object
# address ("<_io.BytesIO object at 0x7f...>"): meaningless to the sender, who is told which
# upload it was instead.
_OBJECT_REPR = re.compile(r"\s*<[\w.]+ object at 0x[0-9a-fA-F]+>")


class UploadError(Exception):
    """A query image refused; `status` is the HTTP status, the message the reason."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status


class _Upload(io.BytesIO):
    """The bytes of one upload, named in decode_image's errors as the request names it."""

    def __init__(self, data: bytes, name: str) -> None:
        super().__init__(data)
        self.label = name

    def __str__(self) -> str:
        return self.label


def spec_for(image_shape: tuple[int, ...]) -> ImageSpec:
    """The ImageSpec of an encoder's per-image shape: (H, W), (H, W, 1) or (H, W, 3)."""
    if len(image_shape) == 2 or (len(image_shape) == 3 and image_shape[2] in (1, 3)):
        return ImageSpec(
            image_shape[0], image_shape[1], len(image_shape) == 3 and image_shape[2] == 3
        )
    raise ValueError(f"encoder: images of shape {image_shape} are neither grey nor RGB")


def decode_upload(
    data: bytes, name: str, image_shape: tuple[int, ...], limits: Limits
) -> np.ndarray:
    """One PNG or JPEG upload as a uint8 array of `image_shape`, or an UploadError naming it."""
    _check_header(data, name, limits)
    try:
        image = decode_image(_Upload(data, name), spec_for(image_shape))
    except ImageDecodeError as exc:
        raise UploadError(400, _without_objects(str(exc))) from None
    return image.reshape(image_shape)


def _check_header(data: bytes, name: str, limits: Limits) -> None:
    if not data:
        raise UploadError(400, f"{name}: empty image")
    try:
        with Image.open(io.BytesIO(data)) as img:
            found, (width, height) = img.format, img.size
    except Image.DecompressionBombError:
        raise UploadError(413, f"{name}: image has too many pixels") from None
    except Image.UnidentifiedImageError:
        raise UploadError(
            400,
            f"{name}: the upload is not a PNG or JPEG image: cannot identify image data "
            f"({len(data)} bytes)",
        ) from None
    except (OSError, ValueError, SyntaxError) as exc:
        raise UploadError(
            400, f"{name}: not a readable image: {_without_objects(str(exc))}"
        ) from None
    if found not in CONTENT_TYPES.values():
        raise UploadError(415, f"{name}: {found} image; send PNG or JPEG")
    if max(width, height) > limits.max_image_side or width * height > limits.max_image_pixels:
        raise UploadError(
            413,
            f"{name}: {width}x{height} pixels is over the limit ({limits.max_image_side} per "
            f"side, {limits.max_image_pixels} in all)",
        )


def _without_objects(message: str) -> str:
    return _OBJECT_REPR.sub("", message)
