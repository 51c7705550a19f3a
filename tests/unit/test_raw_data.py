"""Your own data where data.raw_dir says: named by the key before anything derives from it,
in every command, and a dataset name that leaves its results no folder of their own."""

from __future__ import annotations

import copy
import shutil

import pytest
import yaml

from shdh import settings
from shdh.data.table import TABLE_SUFFIXES
from shdh.settings import raw_data
from shdh.settings.locations import check_results_location
from shdh.settings.profiles import ConfigError, load_params
from tests.conftest import REPO
from tests.readonly import run_without_override


@pytest.fixture
def own(tmp_path, monkeypatch):
    """params.yaml for a folder dataset `shapes` on the smoke profile, in a checkout-like
    tmp_path (a dvc.yaml, so the project's results folders are owned)."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(REPO / "dvc.yaml", tmp_path / "dvc.yaml")
    (tmp_path / "shapes" / "a").mkdir(parents=True)
    (tmp_path / "labels.csv").write_text("image,label\n")
    params = copy.deepcopy(load_params(REPO / "params.yaml"))
    params["data"].update(dataset="folder", raw_dir="shapes")
    params["profile"] = "smoke"
    params["evaluate"].update(
        results_dir="results/shapes/smoke", report="results/shapes/smoke/report.md"
    )
    return params


def load(params: dict) -> settings.Settings:
    path = "params.yaml"
    with open(path, "w") as f:
        yaml.safe_dump(params, f)
    return settings.load(path)


CASES = [
    (
        "folder",
        "shapez",
        "data.raw_dir: shapez does not exist (data.dataset: folder reads a folder",
    ),
    ("folder", "labels.csv", "data.raw_dir: labels.csv is not a folder (data.dataset: folder"),
    ("table", "label.csv", "data.raw_dir: label.csv does not exist (data.dataset: table reads a"),
    ("table", "shapes", "data.raw_dir: shapes is a folder, not a table file (data.dataset: table"),
    ("table", "dvc.yaml", "data.raw_dir: dvc.yaml is not a table file (data.dataset: table reads"),
]


@pytest.mark.parametrize(("dataset", "raw_dir", "message"), CASES, ids=[c[1] for c in CASES])
def test_a_bad_raw_dir_is_named_by_its_key_before_the_results_folder(
    own, dataset, raw_dir, message
):
    """shapez/smoke is not the folder the results point at: without this check the misspelt
    folder would be reported as another dataset's results."""
    own["data"].update(dataset=dataset, raw_dir=raw_dir)
    with pytest.raises(ConfigError) as err:
        load(own)
    assert str(err.value).startswith(f"params.yaml: {message}") and "\n" not in str(err.value)
    own["data"].update(dataset="folder", raw_dir="shapes")
    check_results_location(load(own).params, "params.yaml")  # the right folder: all well
    own["data"].update(dataset="table", raw_dir="labels.csv")
    load(own)


def test_a_built_in_data_set_may_not_be_there_yet(own):
    own["data"].update(dataset="cifar100", raw_dir="data/not-fetched-yet")
    own["evaluate"].update(results_dir="r", report="r/report.md")
    load(own)


def test_the_table_formats_are_the_table_readers(own):
    assert raw_data.TABLE_SUFFIXES == TABLE_SUFFIXES


def test_an_unreadable_raw_dir_is_named(own, tmp_path):
    (tmp_path / "shapes").chmod(0o000)
    try:
        (tmp_path / "params.yaml").write_text(yaml.safe_dump(own))
        code = "from shdh import settings; settings.load('params.yaml')"
        proc = run_without_override(["-c", code], cwd=tmp_path)
    finally:
        (tmp_path / "shapes").chmod(0o755)
    assert "params.yaml: data.raw_dir: shapes cannot be read: Permission denied" in proc.stderr


def test_a_dataset_named_after_a_published_folder_is_told_to_choose_a_name(own):
    """results/paper/smoke would lie in the paper profile's published results: suggesting it
    would only be refused again."""
    own["data"]["name"] = "paper"
    with pytest.raises(ConfigError) as err:
        check_results_location(own, "params.yaml")
    assert str(err.value).startswith(
        "params.yaml: data.name: the dataset's name paper is also the name of the project's "
        "published results folder results/paper (dataset fashion-mnist-h, profile paper)"
    )
    assert str(err.value).endswith("set data.name to another name")
