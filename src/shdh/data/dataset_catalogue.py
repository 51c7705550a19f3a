"""The datasets `data.dataset` may name, each declared once: its name and the module that reads it.

A dataset's module holds its whole recipe, by these names:
  - `fetch_raw(raw_dir, sources=..., verify=...) -> Path`: bring the raw files into raw_dir;
  - `convert(raw_dir, out, verify=..., table=..., **reader) -> LabelTree`: write the items as a
    dataset directory at `out` and return the label tree they carry (`reader`: those of the
    folder and table readers' options that the settings give, shdh.steps.prepare.READER_OPTIONS);
  - `label_tree() -> LabelTree`, for a dataset whose tree is built in (`tree.source:
    builtin:NAME`).

Why a module's name: the settings check `data.dataset` and `tree.source` against this catalogue
in every command, which must not load every reader. shdh.steps.prepare.dataset_module imports
the one a run uses; the DVC stages whose code uses that step depend on every reader declared
here (tests/dvc_code_deps.py reads this catalogue).
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

from shdh.runtime.errors import ConfigError


@dataclass(frozen=True)
class DatasetEntry:
    """How to read one dataset: `module` is its module's dotted name, or the module itself (a
    test's toy, made on the fly)."""

    module: str | ModuleType
    builtin_tree: bool = False  # whether its module has label_tree()
    own: bool = False  # the user's own data: nothing to download, read where data.raw_dir is


DATASETS: dict[str, DatasetEntry] = {
    "fashion-mnist-h": DatasetEntry("shdh.data.fashion_mnist", builtin_tree=True),
    "cifar100": DatasetEntry("shdh.data.cifar100", builtin_tree=True),
    "iaprtc12": DatasetEntry("shdh.data.iaprtc12"),
    # your own data: images in one folder per label path, or a CSV/Parquet table of them
    "folder": DatasetEntry("shdh.data.folder", own=True),
    "table": DatasetEntry("shdh.data.table", own=True),
}
DATASET_NAMES: tuple[str, ...] = tuple(DATASETS)
# The datasets whose tree `tree.source: builtin:NAME` names.
BUILTIN_TREES: tuple[str, ...] = tuple(name for name, e in DATASETS.items() if e.builtin_tree)


def dataset_entry(name: str) -> DatasetEntry:
    """The catalogue's entry for `data.dataset`, or a ConfigError naming the known datasets."""
    if name not in DATASETS:
        raise ConfigError(f"data.dataset: unknown dataset '{name}' (known: {', '.join(DATASETS)})")
    return DATASETS[name]
