"""The features step: 512-D GIST of every item, what the shallow baselines fit and encode."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np

from shdh.runtime.atomic import check_writable

log = logging.getLogger(__name__)


def features(prepared_dir: str | Path, out: str | Path, *, batch_size: int = 256) -> Path:
    """512-D GIST of every item (train and query alike), for the shallow baselines."""
    from shdh.data.dataset import load_dataset
    from shdh.features.gist import gist_features
    from shdh.runtime.atomic import atomic_path

    check_writable(out, "features.out")
    ds = load_dataset(Path(prepared_dir) / "dataset")
    values = gist_features(ds.images, batch_size=batch_size, progress=False)
    with atomic_path(out, suffix=".npy") as tmp:
        np.save(tmp, values.astype(np.float32))
    log.info("wrote %s: %s GIST features", out, values.shape)
    return Path(out)
