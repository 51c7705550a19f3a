"""Results per dataset and profile: the project's published results are written only by the
profiles that own them, and `shdh profile apply` points every other run at its own folder."""

from __future__ import annotations

import copy
import shutil

import pytest

from shdh.settings.locations import (
    check_results_location,
    dataset_label,
    owner,
    results_location,
)
from shdh.settings.profiles import ConfigError, apply_profile, load_params
from tests.conftest import REPO


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    """A working directory like the repository's: dvc.yaml, params.yaml and profiles/."""
    shutil.copy(REPO / "dvc.yaml", tmp_path / "dvc.yaml")
    shutil.copy(REPO / "params.yaml", tmp_path / "params.yaml")
    shutil.copytree(REPO / "profiles", tmp_path / "profiles")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_each_location_belongs_to_one_dataset_and_profile(in_tmp):
    assert owner("results") == owner("docs/results.md") == ("fashion-mnist-h", "default")
    assert owner("results/metrics.json") == ("fashion-mnist-h", "default")
    assert owner("results/paper/plots") == ("fashion-mnist-h", "paper")
    assert owner("docs/results-paper.md") == ("fashion-mnist-h", "paper")
    assert (
        owner("results/methods")
        == owner("docs/results-methods.md")
        == (
            "fashion-mnist-h",
            "methods",
        )
    )
    assert owner("results/gpu/fits") == owner("docs/results-gpu.md") == ("fashion-mnist-h", "gpu")
    assert owner("results/shapes/smoke/report.md") == ("shapes", "smoke")
    assert owner(in_tmp / "results" / "shapes" / "smoke") == ("shapes", "smoke")
    assert owner("elsewhere/results") is None and owner("docs/my-notes.md") is None
    (in_tmp / "dvc.yaml").unlink()  # not a checkout of the project: nothing is published here
    assert owner("results") is None and owner("results/shapes/smoke") is None
    assert results_location("fashion-mnist-h", "paper") == (
        "results/paper",
        "docs/results-paper.md",
    )
    assert results_location("shapes", None) == (
        "results/shapes/custom",
        "results/shapes/custom/report.md",
    )


def test_a_dataset_is_named_after_its_folder_table_or_name():
    assert dataset_label({"dataset": "cifar100", "raw_dir": "data/cifar"}) == "cifar100"
    assert dataset_label({"dataset": "folder", "raw_dir": "photos/shapes/"}) == "shapes"
    assert dataset_label({"dataset": "table", "raw_dir": "x/labels.csv"}) == "labels"
    assert dataset_label({"dataset": "table", "raw_dir": "x/labels.csv", "name": "mine"}) == "mine"


def test_another_dataset_may_not_write_the_projects_results(in_tmp):
    params = load_params("params.yaml")
    check_results_location(params, "params.yaml")  # default on Fashion-MNIST-H: its own
    params["data"].update(dataset="folder", raw_dir="shapes")
    with pytest.raises(ConfigError) as err:
        check_results_location(params, "params.yaml")
    assert str(err.value) == (
        "params.yaml: evaluate.results_dir: results holds the results of dataset "
        "fashion-mnist-h, profile default, and this run (dataset shapes, profile default) would "
        "overwrite them; set evaluate.results_dir: results/shapes/default and evaluate.report: "
        "results/shapes/default/report.md (`shdh profile apply default` sets both)"
    )
    params["evaluate"]["results_dir"] = "results/shapes/default"
    with pytest.raises(ConfigError, match="evaluate.report: docs/results.md holds"):
        check_results_location(params, "params.yaml")
    params["evaluate"]["report"] = "results/shapes/default/report.md"
    check_results_location(params, "params.yaml")
    other = copy.deepcopy(params)
    other["profile"] = "smoke"  # the same data on another profile: not default's folder either
    with pytest.raises(ConfigError, match="dataset shapes, profile default, and this run"):
        check_results_location(other, "params.yaml")
    check_results_location(params, "p", results_dir="/tmp/anywhere", report="notes/r.md")


def test_profile_apply_moves_a_run_on_other_data_to_its_own_folder(in_tmp):
    text = (in_tmp / "params.yaml").read_text()
    text = text.replace("dataset: fashion-mnist-h", "dataset: folder")
    (in_tmp / "params.yaml").write_text(text.replace("raw_dir: data/fashion-mnist", "raw_dir: x"))
    for profile in ("default", "paper", "smoke", "gpu"):
        apply_profile(profile, "params.yaml", "profiles")
        evaluate = load_params("params.yaml")["evaluate"]
        assert evaluate["results_dir"] == f"results/x/{profile}"
        assert evaluate["report"] == f"results/x/{profile}/report.md"


def test_profile_apply_keeps_a_folder_of_the_users_choosing(in_tmp):
    apply_profile("smoke", "params.yaml", "profiles")
    assert load_params("params.yaml")["evaluate"]["results_dir"] == "results/fashion-mnist-h/smoke"
    text = (in_tmp / "params.yaml").read_text()
    (in_tmp / "params.yaml").write_text(
        text.replace("results_dir: results/fashion-mnist-h/smoke", "results_dir: /srv/out")
    )
    apply_profile("smoke", "params.yaml", "profiles")
    assert load_params("params.yaml")["evaluate"]["results_dir"] == "/srv/out"


def test_runs_are_tagged_with_the_datasets_name_not_its_reader(tmp_path):
    from shdh.commands.common import run_tags

    own = {"data": {"dataset": "folder", "raw_dir": str(tmp_path / "shapes")}, "profile": "smoke"}
    assert run_tags(own)["dataset"] == "shapes"
    named = {"data": {"dataset": "table", "raw_dir": "x/labels.csv", "name": "mine"}}
    assert run_tags(named)["dataset"] == "mine"
    assert run_tags({"data": {"dataset": "cifar100", "raw_dir": "d"}})["dataset"] == "cifar100"
