"""The database's own images, for the page's thumbnails: read from the prepare step's folder
(data.prepared_dir: its dataset/images.npy, memory-mapped read-only, so serving them costs no
copy of the dataset), looked up by item id (ids.npy), and sent as PNG encoded in memory. The
same dataset gives the answers their label paths (labels.npy, shdh.serving.labels)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image

from shdh.data.dataset import load_dataset
from shdh.serving.labels import ItemLabels


class DatasetImages:
    def __init__(self, prepared_dir: str | Path) -> None:
        self.prepared_dir = Path(prepared_dir)
        dataset = load_dataset(self.prepared_dir / "dataset", mmap=True)
        self.name = dataset.name
        self.images = dataset.images
        self._order = np.argsort(dataset.ids, kind="stable")
        self._sorted_ids = np.asarray(dataset.ids)[self._order]
        self.labels = ItemLabels(dataset.ids, dataset.labels)

    def reloaded(self) -> DatasetImages:
        """The folder read again: a reload serves the files there now, not those memory-mapped
        at the start (a prepare step replaces them)."""
        return DatasetImages(self.prepared_dir)

    def png(self, item_id: int) -> bytes:
        """The item's image as PNG bytes; KeyError naming an id the dataset does not hold."""
        ids = self._sorted_ids
        inside = len(ids) and int(ids[0]) <= item_id <= int(ids[-1])  # also: no int64 overflow
        pos = int(np.searchsorted(ids, item_id)) if inside else 0
        if not inside or ids[pos] != item_id:
            raise KeyError(f"item id {item_id} is not in the dataset")
        pixels = np.asarray(self.images[self._order[pos]])
        out = io.BytesIO()
        Image.fromarray(
            pixels.squeeze(-1) if pixels.ndim == 3 and pixels.shape[2] == 1 else pixels
        ).save(out, format="PNG")
        return out.getvalue()
