"""Image files with label paths -> the dataset format: decode, resize, stream, build the tree.

The folder reader (shdh.data.folder) and the table reader (shdh.data.table) differ only in how
they find the images and their labels; everything after that is here, so both formats check
labels, decode, skip bad files and build the label tree the same way.

Images are decoded in batches, by a small process pool when there are many, and written straight
into the memory-mapped images.npy (or shards) of write_dataset_streaming, so converting 60,000
images never holds more than one copy of the final array, and a million never all at once.
The pool returns batches in submission order, so the output does not depend on the number of
workers.
"""

from __future__ import annotations

import logging
import math
import multiprocessing
import os
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image, ImageOps

from shdh.core.hierarchy import LabelTree
from shdh.core.tree_fields import TreeError
from shdh.data.dataset import LABEL_SEP, write_dataset_streaming
from shdh.data.idx import DataFormatError
from shdh.runtime.errors import ConfigError

log = logging.getLogger(__name__)

PATH_SEP = "/"
IMAGE_SUFFIXES = (
    ".png",
    ".jpg",
    ".jpeg",
    ".bmp",
    ".gif",
    ".tif",
    ".tiff",
    ".webp",
    ".ppm",
    ".pgm",
    ".pbm",
)
BATCH_SIZE = 256  # images per pool task: large enough to amortise the transfer, small for RAM
POOL_MIN_ITEMS = 4 * BATCH_SIZE  # below this, starting processes costs more than it saves
MAX_WORKERS = 4
MAX_LISTED = 20  # problems named one by one in an error (or skipped files in the log)


class ImageDecodeError(DataFormatError):
    """An image file cannot be read or decoded; the message names the file."""


def listed_problems(problems: Sequence[str], summary: str) -> str:
    """One error for every problem found: a single one as it is, several as `summary` and one
    line each, the first MAX_LISTED of them, then how many more. Fixing the input one rerun per
    bad file is slow when there are many."""
    if len(problems) == 1:
        return problems[0]
    lines = [summary, *(f"  {problem}" for problem in problems[:MAX_LISTED])]
    if len(problems) > MAX_LISTED:
        lines.append(f"  and {len(problems) - MAX_LISTED} more")
    return "\n".join(lines)


@dataclass(frozen=True)
class ImageSpec:
    """The fixed size and colour mode every image is converted to."""

    height: int = 32
    width: int = 32
    color: bool = True

    def __post_init__(self) -> None:
        for field in ("height", "width"):
            value = getattr(self, field)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"image_size: {field} must be a positive integer, got {value!r}")

    @classmethod
    def of(cls, image_size: int | tuple[int, int], color: bool) -> ImageSpec:
        """From the readers' `image_size` (one side, or (height, width)) and `color` options."""
        if isinstance(image_size, tuple | list):
            if len(image_size) != 2:
                raise ValueError(f"image_size must be N or (height, width), got {image_size!r}")
            return cls(image_size[0], image_size[1], bool(color))
        return cls(image_size, image_size, bool(color))

    @property
    def shape(self) -> tuple[int, ...]:
        """One item's array shape: (H, W, 3) RGB or (H, W) grayscale."""
        return (self.height, self.width, 3) if self.color else (self.height, self.width)


def decode_image(path: str | os.PathLike[str], spec: ImageSpec) -> np.ndarray:
    """One image file as a uint8 array of spec.shape.

    The EXIF orientation is applied (phone photos are stored sideways), alpha is dropped,
    16-bit grayscale keeps its top 8 bits, and the image is stretched to the target size
    without cropping, so nothing of a labelled object is cut away. For JPEGs, `draft` lets the
    decoder scale down by up to 8x while decoding, which makes large photos several times
    faster to convert.
    """
    mode = "RGB" if spec.color else "L"
    size = (spec.width, spec.height)
    try:
        with Image.open(path) as img:
            img.draft(mode, size)
            img.load()  # decode fully now, so a truncated file fails here and not later
            if img.getexif().get(0x0112, 1) != 1:  # 0x0112: the EXIF Orientation tag
                img = ImageOps.exif_transpose(img)
            if img.mode.startswith("I;16"):  # 16-bit grayscale: Pillow would clip at 255
                img = Image.fromarray((np.asarray(img) >> 8).astype(np.uint8))
            img = img.convert(mode)
            if img.size != size:
                img = img.resize(size, Image.Resampling.BILINEAR)
            return np.asarray(img, dtype=np.uint8)
    except (OSError, ValueError, SyntaxError, Image.DecompressionBombError) as exc:
        raise ImageDecodeError(f"{path}: cannot decode image: {exc}") from exc


_Task = tuple[list[str], ImageSpec]
_Decoded = tuple[np.ndarray, list[tuple[int, str]]]


def _decode_batch(task: _Task) -> _Decoded:
    """Decode one batch (in a worker process): the stacked images, zeros where a file failed,
    and the (position in the batch, error message) of every failure."""
    paths, spec = task
    out = np.zeros((len(paths), *spec.shape), dtype=np.uint8)
    bad: list[tuple[int, str]] = []
    for i, path in enumerate(paths):
        try:
            out[i] = decode_image(path, spec)
        except ImageDecodeError as exc:
            bad.append((i, str(exc)))
    return out, bad


def resolve_workers(workers: int | None, n_items: int) -> int:
    """Decoding processes to start; 0 decodes in this process (so does 1: a pool of one only
    adds the transfer).

    None picks automatically: in-process for small inputs, otherwise one process per available
    core up to MAX_WORKERS (decoding is CPU-bound, so more processes than cores only add
    overhead).
    """
    if workers is None:
        if n_items < POOL_MIN_ITEMS:
            return 0
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        workers = min(MAX_WORKERS, cores or 1)
        return workers if workers > 1 else 0
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 0:
        raise ValueError(f"workers must be None or an integer >= 0, got {workers!r}")
    return workers if workers > 1 else 0


@contextmanager
def _batch_decoder(
    workers: int,
) -> Iterator[Callable[[list[_Task]], Iterable[_Decoded]]]:
    """A function mapping batches to decoded batches, in order: in-process, or by a pool that is
    shut down when the block ends, even when the caller stops early with an error."""
    if workers == 0:
        yield lambda tasks: map(_decode_batch, tasks)
        return
    # "spawn": forking a process that has imported torch (threads, CUDA) is unsafe.
    with multiprocessing.get_context("spawn").Pool(workers) as pool:
        yield lambda tasks: pool.imap(_decode_batch, tasks)


def _check_decoded(undecodable: list[str], n_skipped: int, filled: int, n: int) -> None:
    """One error naming every undecodable file (without skip_bad_images), or a warning that
    counts the skipped ones, and an error when none decoded."""
    if undecodable:
        raise ImageDecodeError(
            listed_problems(
                undecodable,
                f"{len(undecodable)} of {n} image files cannot be decoded; set "
                "data.skip_bad_images: true (skip_bad_images=True in Python) to leave them out:",
            )
        )
    if n_skipped:
        log.warning("skipped %d undecodable image(s) of %d (skip_bad_images=True)", n_skipped, n)
        if filled == 0:
            raise ImageDecodeError(f"none of the {n} image files could be decoded")


def stream_images(
    paths: Sequence[str | os.PathLike[str]],
    out: np.ndarray,
    spec: ImageSpec,
    *,
    skip_bad_images: bool = False,
    workers: int | None = None,
) -> np.ndarray | None:
    """Decode paths[i] into out[i]; the `fill` of write_dataset_streaming.

    Without skip_bad_images an undecodable file is an error: every image is still decoded, so
    that one ImageDecodeError names all of them (listed_problems). With it, such files are
    logged and left out, the good images are packed into the first rows of `out`, and the
    positions of the kept items are returned (None when every file decoded).
    """
    n = len(paths)
    if out.shape != (n, *spec.shape) or out.dtype != np.uint8:
        raise ValueError(f"out must be uint8 of shape {(n, *spec.shape)}, got {out.shape}")
    n_workers = resolve_workers(workers, n)
    starts = range(0, n, BATCH_SIZE)
    tasks = [([os.fspath(p) for p in paths[s : s + BATCH_SIZE]], spec) for s in starts]
    t0 = time.perf_counter()
    kept: list[np.ndarray] = []
    bad_positions: list[int] = []
    undecodable: list[str] = []
    filled = 0
    with _batch_decoder(n_workers) as decode:
        for start, (batch, bad) in zip(starts, decode(tasks), strict=True):
            if not skip_bad_images:
                undecodable.extend(message for _, message in bad)
                bad = []  # the rows stay in place; the error below ends the conversion
            good = np.ones(len(batch), dtype=bool)
            for pos, message in bad:
                good[pos] = False
                bad_positions.append(start + pos)
                if len(bad_positions) <= MAX_LISTED:
                    log.warning("skipping an undecodable image: %s", message)
            n_good = int(good.sum())
            out[filled : filled + n_good] = batch[good] if bad else batch
            filled += n_good
            kept.append(start + np.flatnonzero(good))
    seconds = time.perf_counter() - t0
    _check_decoded(undecodable, len(bad_positions), filled, n)
    log.info(
        "decoded %d images to %s in %.1f s (%d worker process(es))",
        filled,
        "x".join(map(str, spec.shape)),
        seconds,
        n_workers,
    )
    return np.concatenate(kept) if bad_positions else None


# --------------------------------------------------------------------------------------------
# Labels and the label tree
# --------------------------------------------------------------------------------------------


def check_name(name: str, where: str) -> str:
    """A tree node name: non-empty, without the path separator or LABEL_SEP."""
    for sep in (PATH_SEP, LABEL_SEP):
        if sep in name:
            raise DataFormatError(f"{where}: name {name!r} contains {sep!r}, which is reserved")
    if not name.strip():
        raise DataFormatError(f"{where}: empty name")
    return name


def parse_label_cell(cell: object, where: str) -> str:
    """Normalise one label cell ("a/b", or "a/b|c/d" for several labels) or raise naming it.

    Whitespace around each path and each name is stripped, as spreadsheets tend to add it.
    """
    if cell is None or (isinstance(cell, float) and math.isnan(cell)):  # Parquet null, NaN
        raise DataFormatError(f"{where}: empty label")
    if not isinstance(cell, str):
        raise DataFormatError(f"{where}: expected a label path (text), got {cell!r}")
    if not cell.strip():
        raise DataFormatError(f"{where}: empty label")
    paths = []
    for path in cell.split(LABEL_SEP):
        parts = [part.strip() for part in path.split(PATH_SEP)]
        if not all(parts):
            raise DataFormatError(f"{where}: label {cell!r} has an empty path component")
        paths.append(PATH_SEP.join(parts))
    return LABEL_SEP.join(paths)


def label_tree(
    labels: Sequence[str],
    origins: Sequence[str],
    *,
    source: str,
    root: str,
    inner_labels: bool,
) -> LabelTree:
    """The label tree of every path in `labels`; errors name the `source` (the folder or table)
    or the origins of the items with the offending labels (all of them, in one error).

    A path that is a prefix of another ("animal/cat" beside "animal/cat/persian") makes its
    items sit on an inner node. LabelTree.from_paths accepts that and such an item matches
    nothing below its own level, but in a folder tree it is far more often a stray file than a
    deliberate choice; it is refused unless `inner_labels` is set. Distinct paths are added in
    sorted order, so node ids do not depend on the order of the items. Names may repeat under
    different parents (`blue/circle`, `purple/circle`): nodes are identified by their path.
    """
    paths = sorted({path for cell in labels for path in cell.split(LABEL_SEP)})
    try:
        tree = LabelTree.from_paths(paths, sep=PATH_SEP, root=root)
    except TreeError as exc:
        raise DataFormatError(f"{source}: label tree: {exc}") from None
    if not inner_labels:
        _refuse_inner_labels(tree, paths, labels, origins, source)
    return tree


def _refuse_inner_labels(
    tree: LabelTree,
    paths: Sequence[str],
    labels: Sequence[str],
    origins: Sequence[str],
    source: str,
) -> None:
    """Every item labelled at an inner node (one of `paths`, the distinct labels), in one
    error (see label_tree)."""
    leaves = set(tree.leaves)
    below = {}  # inner path -> an example of a label that continues below it
    for path in paths:
        node = tree.node_id(path)
        if node not in leaves:
            below[path] = tree.path(tree.children(node)[0])
    if not below:
        return
    problems = [
        f"{origin}: label {path!r} is an inner node of the label tree (other labels continue "
        f"below it, e.g. {below[path]!r})"
        for cell, origin in zip(labels, origins, strict=True)
        for path in cell.split(LABEL_SEP)
        if path in below
    ]
    remedy = (
        "give these items a leaf label, or set data.inner_labels: true (inner_labels=True in "
        "Python) to keep them as items that match nothing below their own level"
    )
    if len(problems) == 1:
        raise DataFormatError(f"{problems[0]}; {remedy}")
    raise DataFormatError(
        listed_problems(
            problems,
            f"{source}: {len(problems)} item labels are inner nodes of the label tree; {remedy}:",
        )
    )


@dataclass(frozen=True)
class ImageItems:
    """What a reader of your own data lists before any image is decoded: the image files, their
    label paths, where each item came from (a path or a table row, for error messages), the
    source and the dataset's name. A folder (shdh.data.folder) and a table (shdh.data.table)
    differ only in how they list them; checking and writing are these, for both."""

    paths: Sequence[Path]
    labels: Sequence[str]
    origins: Sequence[str]
    source: str
    name: str

    def check(self, *, inner_labels: bool = False) -> LabelTree:
        """The dataset name and the label tree checked, as `write` does before it decodes
        anything; the readers' check functions (the inputs stage) run the same checks."""
        check_name(self.name, "name")
        return label_tree(
            self.labels, self.origins, source=self.source, root=self.name, inner_labels=inner_labels
        )

    def write(
        self,
        out_dir: str | os.PathLike[str],
        *,
        image_size: int | tuple[int, int] = 32,
        color: bool = True,
        skip_bad_images: bool = False,
        workers: int | None = None,
        inner_labels: bool = False,
        shard_mb: float | None = None,
    ) -> tuple[Path, LabelTree]:
        """Stream the images into a dataset directory at out_dir and return the label tree.

        Images are resized to image_size (one side, or (height, width)), RGB (N,H,W,3) or, with
        color=False, grayscale (N,H,W). Items keep their order; ids are their positions in it (a
        table's row numbers), so an id always points back to its source even when bad images are
        skipped (skip_bad_images; otherwise an undecodable file is an error). The tree is checked
        before any image is decoded, and rebuilt from the kept items if some were skipped.
        workers: decoding processes (None: one per CPU); inner_labels: allow items labelled with
        an inner node of the tree; shard_mb: store the images as shards of about that many MiB
        (shdh.data.shards; None: one images.npy).
        """
        tree = self.check(inner_labels=inner_labels)
        spec = ImageSpec.of(image_size, color)
        kept: list[np.ndarray | None] = []

        def fill(images: np.ndarray) -> np.ndarray | None:
            kept.append(
                stream_images(
                    self.paths, images, spec, skip_bad_images=skip_bad_images, workers=workers
                )
            )
            return kept[0]

        n_items = len(self.paths)
        ids = np.arange(n_items, dtype=np.int64)
        labels = np.array(self.labels, dtype=np.str_)
        out = write_dataset_streaming(
            out_dir, n_items, spec.shape, labels, ids, self.name, fill, shard_mb=shard_mb
        )
        if kept[0] is not None:  # a subset of a valid tree's labels: rebuilding cannot fail
            n_items = len(kept[0])
            tree = label_tree(
                [self.labels[i] for i in kept[0]],
                [self.origins[i] for i in kept[0]],
                source=self.source,
                root=self.name,
                inner_labels=inner_labels,
            )
        log.info("wrote %s: %d items, tree K=%d", out, n_items, tree.height)
        return out, tree


def own_raw_dir(raw_dir: Path, dataset: str) -> Path:
    """The fetch of a dataset of your own: nothing to download, raw_dir must already hold it."""
    if not raw_dir.exists():
        raise ConfigError(
            f"data.raw_dir: {raw_dir} does not exist; a {dataset} dataset is your own "
            "data and must be there before the pipeline runs"
        )
    return raw_dir
