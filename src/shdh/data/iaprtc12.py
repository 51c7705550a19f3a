"""IAPRTC-12 as the paper uses it: SAIAPR TC-12, the segmented and annotated IAPR TC-12 set.

Escalante et al. (CVIU 2010) segmented the 20,000 IAPR TC-12 photographs and labelled every
region with a concept from a hierarchy rooted at "entity" (height 7 with the root: paper,
"Datasets and Setting"). The distribution (``saiaprtc12ok/benchmark/saiapr_tc-12/``) has one
folder per subset, ``00/`` .. ``40/``, each holding:

- ``images/<image_id>.jpg``;
- ``labels.txt``: one region a line, "image_id region_id label_id" (tab or space separated);
- ``ontology_path.txt``: "image_id region_id chain", the chain being the region's concept and its
  ancestors from the root, written ``entity->->_landscape-nature->_sky->_sky-blue`` as public
  parsers of these files read it (split on "->", empty steps and leading underscores dropped);
  the parser here accepts that notation and the plain ``entity->landscape-nature->...``;

and ``wlist.txt`` (in that folder or one above it) maps "label_id<TAB>name".

The tree comes from the ontology chains, every region's label from labels.txt + wlist.txt. An item
is an image with at least one region labelled below the root; its label is the set of its
regions' label paths, sorted and joined by LABEL_SEP (paper Eq. 1 on sets: two images share
level k when their level-k ancestor sets intersect; METHOD.md). Images are resized to 32x32
("Datasets and Setting") one at a time into a preallocated array.
"""

from __future__ import annotations

import logging
import os
import urllib.parse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from PIL import Image

from shdh.core.hierarchy import LabelTree
from shdh.data.archive import extract_archive
from shdh.data.dataset import LABEL_SEP, Dataset, save_dataset
from shdh.data.download import fetch, mirrors
from shdh.data.iaprtc12_files import (
    ROOT_NAME,
    Ontology,
    Region,
    read_labels,
    read_ontology,
    read_wlist,
)
from shdh.data.idx import DataFormatError

log = logging.getLogger(__name__)

HEIGHT = 7  # the paper's K for IAPRTC-12: the root and six levels below it
IMAGE_SIZE = 32
# The paper does not name a filter; its MATLAB-era pipelines used imresize, whose default is
# bicubic with antialiasing when shrinking. Pillow's BICUBIC widens its kernel the same way.
RESAMPLE = Image.Resampling.BICUBIC
DATASET_NAME = "iaprtc12"
BENCHMARK = "saiapr_tc-12"
EXTRACTED = "saiaprtc12ok"
# The official archive: three RAR volumes linked from https://www.imageclef.org/SIAPRdata.
# No checksum is published for them, so they cannot be verified (a warning says so).
OFFICIAL_BASE = "http://www-i6.informatik.rwth-aachen.de/imageclef/resources/saiaprtc12/"
VOLUMES = ("saiaprtc12ok.part1.rar", "saiaprtc12ok.part2.rar", "saiaprtc12ok.part3.rar")


class BadImageError(DataFormatError):
    """An image file is missing or cannot be decoded."""


# --------------------------------------------------------------------------------------------
# Layout
# --------------------------------------------------------------------------------------------


def _subset_folders(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.is_dir() and (p / "labels.txt").is_file())


def find_benchmark(root: str | os.PathLike[str]) -> Path:
    """The folder holding the subset folders (00/, 01/, ...), from it or any folder above it."""
    root = Path(root)
    candidates = [
        root,
        root / BENCHMARK,
        root / "benchmark" / BENCHMARK,
        root / EXTRACTED / "benchmark" / BENCHMARK,
    ]
    for candidate in candidates:
        if candidate.is_dir() and _subset_folders(candidate):
            return candidate
    raise DataFormatError(
        f"{root}: no SAIAPR TC-12 subset folders (NN/labels.txt) in any of: "
        + ", ".join(str(c) for c in candidates)
    )


def find_wlist(benchmark: Path) -> Path:
    """wlist.txt in the benchmark folder or up to two folders above it."""
    candidates = [benchmark / "wlist.txt", benchmark.parent / "wlist.txt"]
    candidates.append(benchmark.parent.parent / "wlist.txt")
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise DataFormatError(
        "wlist.txt not found; looked for " + ", ".join(str(c) for c in candidates)
    )


def _image_path(folder: Path, image_id: int, images_dir: Path | None) -> Path:
    """``NN/images/<id>.jpg``, else IAPR TC-12's own ``images/NN/<id>.jpg`` under images_dir."""
    own = folder / "images" / f"{image_id}.jpg"
    if own.is_file() or images_dir is None:
        return own
    return images_dir / folder.name / f"{image_id}.jpg"


# --------------------------------------------------------------------------------------------
# Images
# --------------------------------------------------------------------------------------------


def load_image(path: str | os.PathLike[str], size: int = IMAGE_SIZE) -> np.ndarray:
    """Decode one image, convert it to RGB and resize it to (size, size, 3) uint8."""
    path = Path(path)
    try:
        with Image.open(path) as img:
            rgb = img.convert("RGB")
        small = rgb.resize((size, size), RESAMPLE)
    except FileNotFoundError:
        raise BadImageError(f"{path}: image file missing") from None
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as exc:
        raise BadImageError(f"{path}: cannot decode image: {exc}") from exc
    return np.asarray(small, dtype=np.uint8)


# --------------------------------------------------------------------------------------------
# Dataset
# --------------------------------------------------------------------------------------------


def _item_labels(
    regions: Sequence[Region], vocabulary: dict[int, str], ontology: Ontology
) -> tuple[dict[int, set[str]], int]:
    """image_id -> set of label paths; regions labelled with the root itself are dropped.

    A root-labelled region says nothing below level 1 (s^1 never counts, Eq. 2: u_1 = 0).
    Returns the map and the number of dropped regions.
    """
    paths: dict[int, set[str]] = {}
    dropped = 0
    for region in regions:
        name = vocabulary[region.label_id]
        if name == ROOT_NAME:
            dropped += 1
            continue
        if name not in ontology.parent:
            raise DataFormatError(
                f"{region.file}:{region.line}: label_id {region.label_id} ({name!r} in "
                "wlist.txt) is in no ontology_path.txt chain"
            )
        paths.setdefault(region.image_id, set()).add(ontology.path(name))
    return paths, dropped


@dataclass(frozen=True)
class Index:
    """What the text files say: the items (sorted by image id), their labels and image files."""

    ids: np.ndarray  # (N,) int64 image ids
    labels: np.ndarray  # (N,) str, label paths joined by LABEL_SEP
    image_paths: tuple[Path, ...]
    tree: LabelTree


def read_index(
    root: str | os.PathLike[str], *, images_dir: str | os.PathLike[str] | None = None
) -> Index:
    """Parse wlist.txt and every labels.txt and ontology_path.txt; decode no image.

    ``root`` is the ``saiapr_tc-12`` folder or a folder above it. ``images_dir`` is an optional
    IAPR TC-12 ``images/`` folder (``images/NN/<id>.jpg``) for copies without ``NN/images/``.
    """
    benchmark = find_benchmark(root)
    folders = _subset_folders(benchmark)
    vocabulary = read_wlist(find_wlist(benchmark))
    ontology = read_ontology(folder / "ontology_path.txt" for folder in folders)
    tree = ontology.tree()
    if tree.height != HEIGHT:
        log.warning(
            "%s: label tree has height %d, the paper's has %d", benchmark, tree.height, HEIGHT
        )
    folder_of: dict[int, Path] = {}
    regions: list[Region] = []
    for folder in folders:
        folder_regions = read_labels(folder / "labels.txt", vocabulary)
        for region in folder_regions:
            other = folder_of.setdefault(region.image_id, folder)
            if other != folder:
                raise DataFormatError(
                    f"{region.file}:{region.line}: image {region.image_id} is also listed in "
                    f"{other / 'labels.txt'}"
                )
        regions.extend(folder_regions)
    label_sets, dropped = _item_labels(regions, vocabulary, ontology)
    if dropped:
        log.info(
            "%d regions labelled only %r carry no level below the root: ignored", dropped, ROOT_NAME
        )
    if not label_sets:
        raise DataFormatError(f"{benchmark}: no image has a region labelled below {ROOT_NAME!r}")
    ids = sorted(label_sets)
    extra = None if images_dir is None else Path(images_dir)
    return Index(
        ids=np.array(ids, dtype=np.int64),
        labels=np.array([LABEL_SEP.join(sorted(label_sets[i])) for i in ids], dtype=np.str_),
        image_paths=tuple(_image_path(folder_of[i], i, extra) for i in ids),
        tree=tree,
    )


def decode_images(
    paths: Sequence[Path], out: np.ndarray, *, skip_bad_images: bool = False
) -> np.ndarray | None:
    """Decode ``paths`` one at a time into the preallocated (N, 32, 32, 3) uint8 ``out``.

    Only one full-size image is in memory at a time. Returns None when every image was read;
    with ``skip_bad_images``, the ascending positions of the images kept, written compactly to
    rows 0..len(kept)-1 (the contract of dataset.write_dataset_streaming's ``fill``). Without
    it, the first bad image is an error naming it.
    """
    if out.shape != (len(paths), IMAGE_SIZE, IMAGE_SIZE, 3) or out.dtype != np.uint8:
        raise ValueError(
            f"out must be uint8 ({len(paths)}, {IMAGE_SIZE}, {IMAGE_SIZE}, 3), got {out.dtype} "
            f"{out.shape}"
        )
    kept: list[int] = []
    for position, path in enumerate(paths):
        try:
            out[len(kept)] = load_image(path)
        except BadImageError as exc:
            if not skip_bad_images:
                raise
            log.warning("skipping %s", exc)
            continue
        kept.append(position)
    if len(kept) == len(paths):
        return None
    log.warning("left out %d image(s) that could not be decoded", len(paths) - len(kept))
    if not kept:
        raise DataFormatError("no image could be decoded")
    return np.array(kept, dtype=np.int64)


def iaprtc12_dataset(
    root: str | os.PathLike[str],
    *,
    skip_bad_images: bool = False,
    images_dir: str | os.PathLike[str] | None = None,
) -> tuple[Dataset, LabelTree]:
    """Every image with a labelled region, sorted by image id, and the 7-level label tree.

    See read_index for ``root`` and ``images_dir``. An image that is missing or cannot be
    decoded is an error naming it; with ``skip_bad_images`` it is counted, logged and left out.
    """
    index = read_index(root, images_dir=images_dir)
    images = np.empty((len(index.ids), IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
    kept = decode_images(index.image_paths, images, skip_bad_images=skip_bad_images)
    labels, ids = index.labels, index.ids
    if kept is not None:
        images, labels, ids = images[: len(kept)], labels[kept], ids[kept]
    tree = index.tree
    log.info(
        "IAPRTC-12: %d items, tree of %d nodes, height %d", len(ids), tree.n_nodes, tree.height
    )
    return Dataset(images=images, labels=labels, ids=ids, name=DATASET_NAME), tree


# --------------------------------------------------------------------------------------------
# Download
# --------------------------------------------------------------------------------------------


def _location(base: str, name: str) -> str:
    scheme = urllib.parse.urlparse(base).scheme.lower()
    if scheme in ("http", "https", "file", "s3"):
        return base.rstrip("/") + "/" + name
    return str(Path(base) / name)


def fetch_iaprtc12(
    raw_dir: str | os.PathLike[str],
    sources: Sequence[str] | None = None,
    *,
    volumes: Sequence[str] = VOLUMES,
) -> Path:
    """Download the archive volumes into ``raw_dir``, extract them, return the benchmark folder.

    ``sources`` are base locations (URL prefixes or folders) that each hold every volume under
    its name; they are tried in order per volume (default: the official RWTH Aachen mirror).
    ``volumes`` names the files: the official three RAR volumes (which need unrar or 7-Zip
    installed), or e.g. ``("saiaprtc12ok.tar.gz",)`` for a team's re-packed copy. No md5 is
    published for the official volumes, so nothing can be verified; a warning says so.
    Extraction goes to ``raw_dir/saiaprtc12ok`` and appears only once complete.
    """
    if isinstance(sources, str):
        raise TypeError("sources must be a sequence of base locations, not one string")
    if isinstance(volumes, str) or not volumes:
        raise ValueError("volumes must be a non-empty sequence of file names")
    raw_dir = Path(raw_dir)
    dest = raw_dir / EXTRACTED
    if dest.is_dir():
        try:
            return find_benchmark(dest)
        except DataFormatError:
            log.warning("%s is incomplete; extracting again", dest)
    bases = list(sources) if sources is not None else [OFFICIAL_BASE]
    log.warning(
        "SAIAPR TC-12: no checksum is published for %s; the download is not verified",
        ", ".join(volumes),
    )
    for volume in volumes:
        fetch([_location(base, volume) for base in bases], raw_dir / volume)
    extract_archive(raw_dir / volumes[0], dest, check=find_benchmark)
    return find_benchmark(dest)


# --------------------------------------------------------------------------------------------
# The prepare step's recipe for `data.dataset: iaprtc12` (shdh.data.dataset_catalogue)
# --------------------------------------------------------------------------------------------


def fetch_raw(raw_dir: Path, *, sources: Sequence[str], verify: bool) -> Path:
    """fetch_iaprtc12 from data.sources ("official": the RWTH Aachen mirror); nothing published
    can be verified, so `verify` changes nothing."""
    return fetch_iaprtc12(raw_dir, mirrors(sources, OFFICIAL_BASE, DATASET_NAME))


def convert(raw_dir: Path, out: Path, *, verify: bool, table: dict | None, **reader) -> LabelTree:
    """The dataset directory at `out`; of the readers' options only skip_bad_images and
    shard_mb apply."""
    given = {key: reader[key] for key in ("skip_bad_images",) if key in reader}
    ds, tree = iaprtc12_dataset(raw_dir, **given)
    save_dataset(ds, out, shard_mb=reader.get("shard_mb"))
    return tree
