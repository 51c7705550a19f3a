"""A folder tree of images as a dataset: the path below the root is the label path.

    root/vehicle/car/sedan/img001.png  ->  label "vehicle/car/sedan"
    root/animal/cat/x.jpg              ->  label "animal/cat" (a leaf one level higher)

This is how most people already sort hierarchical image collections, so it needs no table. Items
are ordered by their path below the root, compared folder by folder, so the ids (0..N-1) do not
depend on the file system's listing order. Also here: make_demo_folder and make_shapes_folder,
tiny folder datasets for the tests, the smoke pipeline and docs/own-data.md.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from shdh.core.hierarchy import LabelTree
from shdh.data.idx import DataFormatError
from shdh.data.images import (
    IMAGE_SUFFIXES,
    PATH_SEP,
    ImageItems,
    check_name,
    listed_problems,
    own_raw_dir,
)
from shdh.runtime.atomic import atomic_dir


def list_folder_images(root: str | os.PathLike[str]) -> list[tuple[Path, str]]:
    """(image path, label path) of every image below root, sorted by path below the root.

    Images are recognised by their suffix (IMAGE_SUFFIXES, any case); other files and hidden
    files or folders (".DS_Store", ".ipynb_checkpoints") are ignored. Linked folders are
    followed, each real folder once.
    """
    root = Path(root)
    if not root.is_dir():
        raise DataFormatError(f"{root}: not a folder (or it does not exist)")

    def walk_error(err: OSError) -> None:
        raise DataFormatError(f"{err.filename}: cannot list the folder: {err.strerror}") from err

    found: list[tuple[tuple[str, ...], Path]] = []
    seen: set[tuple[int, int]] = set()
    for dirpath, dirnames, filenames in os.walk(root, onerror=walk_error, followlinks=True):
        stat = os.stat(dirpath)
        if (stat.st_dev, stat.st_ino) in seen:  # a link back into the tree: already walked
            dirnames[:] = []
            continue
        seen.add((stat.st_dev, stat.st_ino))
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        rel = Path(dirpath).relative_to(root).parts
        for filename in filenames:
            if not filename.startswith(".") and Path(filename).suffix.lower() in IMAGE_SUFFIXES:
                found.append((rel + (filename,), Path(dirpath) / filename))
    if not found:
        raise DataFormatError(
            f"{root}: no image files found (looked for {', '.join(IMAGE_SUFFIXES)} in the "
            "folders below it)"
        )
    found.sort(key=lambda item: item[0])
    items, problems, named = [], [], set()
    for parts, path in found:
        if len(parts) == 1:
            problems.append(
                f"{path}: an image directly in the root folder has no label; move it into a "
                "folder named after its class"
            )
            continue
        for depth in range(1, len(parts)):
            if parts[:depth] not in named:  # each folder once, not once per image in it
                named.add(parts[:depth])
                try:
                    check_name(parts[depth - 1], str(root.joinpath(*parts[:depth])))
                except DataFormatError as exc:
                    problems.append(str(exc))
        items.append((path, PATH_SEP.join(parts[:-1])))
    if problems:
        summary = f"{root}: {len(problems)} problems in the folder tree:"
        raise DataFormatError(listed_problems(problems, summary))
    return items


def folder_items(root: str | os.PathLike[str], name: str | None = None) -> ImageItems:
    """The images below root and their labels, the folders' names; `name` (default: the root
    folder's name) names the dataset and the tree's root."""
    root = Path(root)
    listed = list_folder_images(root)
    paths = [path for path, _ in listed]
    return ImageItems(
        paths=paths,
        labels=[label for _, label in listed],
        origins=[str(path) for path in paths],
        source=str(root),
        name=name if name is not None else (root.resolve().name or "root"),
    )


def check_folder(
    root: str | os.PathLike[str],
    *,
    inner_labels: bool = False,
    name: str | None = None,
    skip_bad_images: bool = False,
) -> list[Path]:
    """Every check of folder_dataset that needs no image decoded (the folders' names, the
    labels and their tree, the dataset's name, links to nothing); returns the image paths. The
    pipeline's inputs stage runs it, so that such errors stop `dvc repro` before it deletes the
    prepared data. A link to nothing would fail decoding: with skip_bad_images it is skipped
    there, as an undecodable image is."""
    items = folder_items(root, name)
    items.check(inner_labels=inner_labels)
    dangling = [path for path in items.paths if not path.exists()]
    if dangling and not skip_bad_images:
        shown = "\n".join(f"  {path}: links to {os.readlink(path)}" for path in dangling[:10])
        raise DataFormatError(
            f"{root}: {len(dangling)} image link(s) lead to no file; restore their targets, "
            f"remove them, or set data.skip_bad_images: true:\n{shown}"
        )
    return list(items.paths)


def folder_dataset(
    root: str | os.PathLike[str],
    out_dir: str | os.PathLike[str],
    *,
    name: str | None = None,
    **options: Any,
) -> tuple[Path, LabelTree]:
    """Convert a folder tree of images into a dataset directory at out_dir; return the tree.
    options: those of shdh.data.images.ImageItems.write (image_size, color, skip_bad_images,
    workers, inner_labels, shard_mb)."""
    return folder_items(root, name).write(out_dir, **options)


# The prepare step's recipe for `data.dataset: folder` (shdh.data.dataset_catalogue).


def fetch_raw(raw_dir: Path, *, sources: Sequence[str], verify: bool) -> Path:
    """Your own folder is not fetched: it must be at raw_dir already."""
    return own_raw_dir(raw_dir, "folder")


def convert(raw_dir: Path, out: Path, *, verify: bool, table: dict | None, **reader) -> LabelTree:
    """folder_dataset with the readers' options the settings give."""
    return folder_dataset(raw_dir, out, **reader)[1]


# --------------------------------------------------------------------------------------------
# A tiny demo dataset
# --------------------------------------------------------------------------------------------

# Leaves at two depths below the root: K = 4 with "animal/bird" and "vehicle/boat" stopping at 3.
DEMO_LEAVES = (
    "animal/bird",
    "animal/mammal/cat",
    "animal/mammal/dog",
    "vehicle/boat",
    "vehicle/car/sedan",
    "vehicle/car/truck",
)


def _demo_image(leaf: str, rng: np.random.Generator, size: int) -> np.ndarray:
    """Noise plus one cue per level, so that items sharing an ancestor share its cue: the
    top-level node tints the background, a middle node adds stripes, the leaf a bright square."""
    parts = leaf.split(PATH_SEP)
    img = rng.integers(0, 60, size=(size, size, 3), dtype=np.uint8)
    img[..., 0 if parts[0] == "animal" else 2] += 80
    if len(parts) == 3:
        img[::4, :, 1] = 200  # mammal / car: horizontal stripes
    slot = DEMO_LEAVES.index(leaf)
    row, col = divmod(slot, 3)
    side = size // 4
    top, left = size // 8 + row * size // 2, size // 16 + col * size // 3
    img[top : top + side, left : left + side] = 255
    return img


def make_demo_folder(
    root: str | os.PathLike[str], n_per_leaf: int = 8, seed: int = 0, size: int = 32
) -> Path:
    """Write DEMO_LEAVES' folders with n_per_leaf size x size PNGs each under root.

    The images are class-dependent (see _demo_image), so a hashing method can learn the tree.
    root must not exist or be empty; the folder appears complete or not at all.
    """
    return _write_leaf_folders(root, DEMO_LEAVES, _demo_image, n_per_leaf, seed, size)


# Colour defines the two upper levels, the shape the leaf: every leaf name appears under each
# colour, as in real collections (`other`, `misc`), and items of different colours share the
# same leaf name.
SHAPE_COLOURS = {
    "warm": {"red": (220, 40, 40), "orange": (240, 140, 20), "yellow": (230, 220, 40)},
    "cool": {"blue": (40, 70, 220), "green": (40, 170, 60), "purple": (140, 50, 190)},
}
SHAPES = ("circle", "square")
SHAPE_LEAVES = tuple(
    f"{family}{PATH_SEP}{colour}{PATH_SEP}{shape}"
    for family, colours in SHAPE_COLOURS.items()
    for colour in colours
    for shape in SHAPES
)


def _shape_image(leaf: str, rng: np.random.Generator, size: int) -> np.ndarray:
    """A shape of the leaf's colour, at a random place and size, on a grey noise background."""
    family, colour, shape = leaf.split(PATH_SEP)
    img = rng.integers(90, 140, size=(size, size, 3), dtype=np.uint8)
    radius = int(rng.integers(size // 5, size // 3))
    cy, cx = rng.integers(radius, size - radius, size=2)
    yy, xx = np.mgrid[:size, :size]
    if shape == "circle":
        inside = (yy - cy) ** 2 + (xx - cx) ** 2 <= radius**2
    else:
        inside = (abs(yy - cy) <= radius) & (abs(xx - cx) <= radius)
    img[inside] = SHAPE_COLOURS[family][colour]
    return img


def make_shapes_folder(
    root: str | os.PathLike[str], n_per_leaf: int = 20, seed: int = 0, size: int = 16
) -> Path:
    """Write SHAPE_LEAVES (2 families > 6 colours > the same 2 shape names under each) with
    n_per_leaf PNGs each under root: a folder tree whose leaf names repeat, as docs/own-data.md
    describes. root must not exist or be empty."""
    return _write_leaf_folders(root, SHAPE_LEAVES, _shape_image, n_per_leaf, seed, size)


def _write_leaf_folders(
    root: str | os.PathLike[str],
    leaves: tuple[str, ...],
    image: Callable[[str, np.random.Generator, int], np.ndarray],
    n_per_leaf: int,
    seed: int,
    size: int,
) -> Path:
    """n_per_leaf PNGs `image(leaf, rng, size)` in each leaf's folder, LEAF-NAME_iii.png."""
    root = Path(root)
    if root.exists() and (not root.is_dir() or any(root.iterdir())):
        raise FileExistsError(f"{root}: exists and is not an empty folder; choose a new one")
    if n_per_leaf < 1 or size < 8:
        raise ValueError(f"need n_per_leaf >= 1 and size >= 8, got {n_per_leaf} and {size}")
    rng = np.random.default_rng(seed)
    with atomic_dir(root) as tmp:
        for leaf in leaves:
            folder = tmp.joinpath(*leaf.split(PATH_SEP))
            folder.mkdir(parents=True)
            for i in range(n_per_leaf):
                Image.fromarray(image(leaf, rng, size)).save(folder / f"{folder.name}_{i:03d}.png")
    return root
