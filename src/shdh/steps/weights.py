"""The pretrained weights of a deep fit, brought to the machine that trains: an s3:// or https://
`train.pretrained` is fetched (resumably, its SHA-256 verified when given, and always for
https://) into the cache the network layer reads (shdh.nets.pretrained.remote_copy). Local files
and torchvision names need nothing: they are read where they are.
"""

from __future__ import annotations

import logging
from pathlib import Path

from shdh.data import download
from shdh.nets.pretrained import REMOTE_SCHEMES, WeightsError, remote_copy
from shdh.training.loop_settings import LoopSettings

log = logging.getLogger(__name__)


def fetch_weights(loop: LoopSettings) -> Path | None:
    """The local copy of remote pretrained weights, fetched when it is not there verified;
    None when the weights are not remote."""
    spec = loop.pretrained
    if not spec.startswith(REMOTE_SCHEMES):
        return None
    dest = remote_copy(spec)
    try:
        path = download.fetch([spec], dest, sha256=loop.pretrained_sha256)
    except (download.DownloadError, ValueError) as err:
        raise WeightsError(f"train.pretrained: cannot fetch {spec}: {err}") from err
    log.info("pretrained weights %s at %s", spec, path)
    return path
