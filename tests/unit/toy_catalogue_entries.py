"""A method and a dataset from outside the package, declared the way a user adds their own:
the toy method's declaration (shdh.hashers.method_catalogue.Method) and the toy dataset's recipes
(the module shape shdh.data.dataset_catalogue reads). tests/unit/test_toy_registration.py registers
them for one test and runs them through every library step.

The toy method's class lives in tests/unit/toy_hasher.py, a module of its own, so that it is
first imported after the declaration is registered and takes its name from it, as a declared
method's class does."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import numpy as np

from shdh.core.hierarchy import LabelTree
from shdh.data.dataset import Dataset, save_dataset
from shdh.hashers.method_catalogue import Method
from shdh.runtime.value_checks import Checked, number, setting


@dataclass(frozen=True)
class ToySettings(Checked):
    # multiplies the projection: the codes are the same for any scale > 0
    scale: float = setting(number(0, open_low=True), "multiplies the random projection", 1.0)


TOY_METHOD = Method(
    "toy-rp", "shallow", "tests.unit.toy_hasher", "RandomSigns", ToySettings, "Toy random signs"
)

TOY_DATASET = "toy-shapes"
# Two superclasses of two leaves each: K = 3 levels with the root.
TOY_LEAVES = ("bars/horizontal", "bars/vertical", "blocks/left", "blocks/right")
RAW_FILE = "toy-shapes.npz"
SIDE = 32


def label_tree() -> LabelTree:
    return LabelTree.from_paths(TOY_LEAVES, root="shapes")


def toy_images(labels: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A bright bar or block per leaf on a noisy background: siblings share a shape."""
    images = rng.normal(40, 10, (len(labels), SIDE, SIDE))
    for image, leaf in zip(images, labels, strict=True):
        if leaf == 0:
            image[12:20, :] += 150
        elif leaf == 1:
            image[:, 12:20] += 150
        elif leaf == 2:
            image[8:24, 2:14] += 150
        else:
            image[8:24, 18:30] += 150
    return np.clip(images, 0, 255).astype(np.uint8)


def fetch_raw(raw_dir: Path, *, sources, verify: bool) -> Path:
    """The raw file a download would bring: 48 images and their leaves, made from a seed."""
    rng = np.random.default_rng(7)
    labels = rng.permutation(np.arange(48) % len(TOY_LEAVES))
    raw_dir.mkdir(parents=True, exist_ok=True)
    np.savez(raw_dir / RAW_FILE, images=toy_images(labels, rng), labels=labels)
    return raw_dir


def convert(raw_dir: Path, out: Path, *, verify: bool, table, **reader) -> LabelTree:
    """The raw file as a dataset directory whose labels are the leaves' paths."""
    with np.load(raw_dir / RAW_FILE) as raw:
        images, leaves = raw["images"], raw["labels"]
    labels = np.array([TOY_LEAVES[i] for i in leaves], dtype=np.str_)
    ids = np.arange(len(labels), dtype=np.int64)
    save_dataset(Dataset(images, labels, ids, TOY_DATASET), out)
    return label_tree()


def toy_dataset_module() -> ModuleType:
    """The dataset's module as the catalogue takes it: its three recipes under their names."""
    module = ModuleType("toy_shapes")
    module.fetch_raw, module.convert, module.label_tree = fetch_raw, convert, label_tree
    return module
