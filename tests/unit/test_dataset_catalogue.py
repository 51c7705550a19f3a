"""The dataset catalogue (shdh.data.dataset_catalogue): every dataset is one entry there and one
module of recipes; the prepare step reaches a dataset only through it, loading only the module it
uses."""

from __future__ import annotations

import dataclasses
import inspect
import subprocess
import sys
from types import ModuleType

import numpy as np
import pytest

from shdh.core.hierarchy import LabelTree
from shdh.core.tree_fields import TreeError
from shdh.data import dataset_catalogue
from shdh.data.dataset import Dataset, load_dataset, save_dataset
from shdh.data.dataset_catalogue import DatasetEntry
from shdh.data.folder import folder_dataset
from shdh.data.images import ImageItems
from shdh.data.table import table_dataset
from shdh.runtime.errors import ConfigError
from shdh.steps import prepare as step
from shdh.steps.prepare import LABEL_TREE_FILE, SPLIT_FILE, builtin_tree, dataset_module
from tests.conftest import REPO

TOY_LEAVES = ("a/x", "a/y", "b/z")


def toy_module(calls: list) -> ModuleType:
    """A dataset outside the package: its three recipes, recording how they were called."""
    toy = ModuleType("toy_dataset")

    def fetch_raw(raw_dir, *, sources, verify):
        calls.append(("fetch_raw", raw_dir, list(sources), verify))
        return raw_dir

    def convert(raw_dir, out, *, verify, table, **reader):
        calls.append(("convert", raw_dir, verify, table, reader))
        n = 12
        labels = np.array([TOY_LEAVES[i % 3] for i in range(n)], dtype=np.str_)
        images = np.arange(n * 16, dtype=np.uint8).reshape(n, 4, 4)
        save_dataset(Dataset(images, labels, np.arange(n, dtype=np.int64), "toy"), out)
        return toy.label_tree()

    toy.fetch_raw, toy.convert = fetch_raw, convert
    toy.label_tree = lambda: LabelTree.from_paths(TOY_LEAVES, root="toy")
    return toy


@pytest.fixture
def toy(monkeypatch) -> list:
    """A toy dataset "toy" with a built-in tree, registered for one test only."""
    calls: list = []
    monkeypatch.setitem(dataset_catalogue.DATASETS, "toy", DatasetEntry(toy_module(calls), True))
    return calls


def test_every_dataset_module_has_its_recipes():
    for name, entry in dataset_catalogue.DATASETS.items():
        module = dataset_module(name)
        assert module.__name__ == entry.module
        assert callable(module.fetch_raw) and callable(module.convert), name
        assert hasattr(module, "label_tree") == entry.builtin_tree, name
        assert list(inspect.signature(module.convert).parameters)[:4] == [
            "raw_dir",
            "out",
            "verify",
            "table",
        ]
    assert dataset_catalogue.DATASET_NAMES == tuple(dataset_catalogue.DATASETS)
    assert dataset_catalogue.BUILTIN_TREES == tuple(
        name for name in dataset_catalogue.DATASETS if hasattr(dataset_module(name), "label_tree")
    )


def test_an_unknown_dataset_names_the_setting_and_the_known_ones(tmp_path):
    known = ", ".join(dataset_catalogue.DATASETS)
    for run in (
        lambda: step.fetch(tmp_path, dataset="mnist"),
        lambda: step.prepare(tmp_path, tmp_path / "out", dataset="mnist"),
    ):
        with pytest.raises(
            ConfigError, match=rf"^data.dataset: unknown dataset 'mnist' \(known: {known}\)$"
        ):
            run()
    assert not (tmp_path / "out").exists()


def test_builtin_trees_come_from_their_datasets():
    from shdh.data import cifar100, fashion_mnist

    assert builtin_tree("cifar100") == cifar100.label_tree()
    assert builtin_tree("fashion-mnist-h") == fashion_mnist.label_tree()
    assert builtin_tree("fashion-mnist-h").height == 4
    with pytest.raises(TreeError, match=f"'mnist'.*{', '.join(dataset_catalogue.BUILTIN_TREES)}$"):
        builtin_tree("mnist")
    with pytest.raises(TreeError, match="'folder'"):  # a dataset, but without a tree of its own
        builtin_tree("folder")


def test_a_toy_dataset_in_a_temporary_registry_goes_through_fetch_and_prepare(tmp_path, toy):
    raw = tmp_path / "raw"
    assert step.fetch(raw, dataset="toy", sources=["somewhere"], verify=False) == raw
    out = step.prepare(raw, tmp_path / "prepared", dataset="toy", query_fraction=0.25, color=False)
    assert toy == [
        ("fetch_raw", raw, ["somewhere"], False),
        ("convert", raw, True, None, {"color": False}),  # only the reader options given
    ]
    ds = load_dataset(out / "dataset")
    assert ds.name == "toy" and len(ds.ids) == 12
    assert LabelTree.load(out / LABEL_TREE_FILE) == builtin_tree("toy")
    assert (out / SPLIT_FILE).is_file()


def test_prepare_options_pass_only_the_data_settings_given():
    data = {"dataset": "folder", "query_fraction": 0.1, "max_items": None, "name": "shapes"}
    assert step.prepare_options({**data, "raw_dir": "x"}) == data
    assert step.prepare_options({**data, "verify": False, "table": {}, "workers": 2}) == {
        **data,
        "verify": False,
        "table": {},
        "workers": 2,
    }


def test_the_readers_defaults_are_the_data_settings_defaults():
    """A data setting left out of params.yaml reaches no reader: the reader's own default
    applies, so it must be the one the settings document."""
    from shdh.settings.sections import DataSettings

    documented = {f.name: f.default for f in dataclasses.fields(DataSettings)}
    written = inspect.signature(ImageItems.write).parameters  # the options both readers pass on
    for reader in (folder_dataset, table_dataset):
        parameters = {**written, **inspect.signature(reader).parameters}
        for option in step.READER_OPTIONS:
            assert parameters[option].default == documented[option], (reader.__name__, option)


def test_choosing_a_dataset_loads_only_its_reader():
    code = (
        "import sys\n"
        "from shdh.steps import prepare\n"
        "import shdh.settings\n"
        "readers = {'shdh.data.' + m for m in ('cifar100', 'iaprtc12', 'folder', 'table',"
        " 'fashion_mnist')}\n"
        "print(sorted(readers & set(sys.modules)), 'PIL' in sys.modules)\n"
        "prepare.dataset_module('cifar100')\n"
        "print(sorted(readers & set(sys.modules)), 'PIL' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert result.stdout.splitlines() == ["[] False", "['shdh.data.cifar100'] False"]
