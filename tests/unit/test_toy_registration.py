"""A method and a dataset from outside the package go through every library step once they are
registered, with no other edit: prepare (the dataset's fetch_raw and convert), tree (its built-in
tree), S-matrix, GIST features (the toy method is shallow), plan, fit, score and report, where
the toy method has its rows and its place in the shallow group of the paper's claims.

Both are registered for one test only (monkeypatch): the method as one more declaration in
shdh.hashers.method_catalogue.METHODS, the dataset as one more entry of
shdh.data.dataset_catalogue.DATASETS."""

from __future__ import annotations

import dataclasses
import json
import sys

import mlflow
import numpy as np
import pytest

from shdh.core.codes_file import load_codes
from shdh.core.hierarchy import LabelTree
from shdh.core.level_weights import layer_weights
from shdh.data import dataset_catalogue
from shdh.data.dataset_catalogue import DatasetEntry
from shdh.hashers import load_hasher, method_catalogue
from shdh.plan import all_methods
from shdh.reporting import report
from shdh.reporting.figures import load_curves
from shdh.runtime.errors import ConfigError
from shdh.settings import sections
from shdh.settings.checks import parse_section
from shdh.steps import fit_shallow
from shdh.steps import prepare as prepare_step
from shdh.steps.features import features
from shdh.steps.score import score
from shdh.steps.smatrix import load_smatrix, smatrix
from shdh.steps.tree import load_tree, tree
from tests.unit.toy_catalogue_entries import (
    TOY_DATASET,
    TOY_LEAVES,
    TOY_METHOD,
    ToySettings,
    toy_dataset_module,
)

TOY_HASHER_MODULE = TOY_METHOD.module
N = 10  # the @n of the scores: 12 queries against a database of 36


@pytest.fixture
def registered(monkeypatch):
    """The toy method and the toy dataset, registered until the test ends. The toy method's
    module is imported afresh under the registration, as a declared method's is on first use."""
    monkeypatch.setattr(method_catalogue, "METHODS", (*method_catalogue.METHODS, TOY_METHOD))
    monkeypatch.setitem(
        dataset_catalogue.DATASETS, TOY_DATASET, DatasetEntry(toy_dataset_module(), True)
    )
    monkeypatch.delitem(sys.modules, TOY_HASHER_MODULE, raising=False)
    yield
    sys.modules.pop(TOY_HASHER_MODULE, None)


def _data_steps(tmp_path):
    """prepare -> tree -> smatrix -> features on the toy dataset; their outputs' paths."""
    raw = prepare_step.fetch(tmp_path / "raw", dataset=TOY_DATASET, sources=["none"])
    prepared = prepare_step.prepare(
        raw, tmp_path / "prepared", dataset=TOY_DATASET, query_fraction=0.25
    )
    tree_dir = tree(prepared, tmp_path / "tree", source=f"builtin:{TOY_DATASET}")
    s_path = smatrix(tree_dir, tmp_path / "smatrix.npz", prepared_dir=prepared, sample_size=16)
    return prepared, tree_dir, s_path, features(prepared, tmp_path / "gist.npy")


def _settings(tmp_path) -> dict:
    """The plan's settings: the toy at two code lengths with a setting of its own, no deep
    method (a deep fit would take most of the test's time)."""
    return {
        "seed": 0,
        "train": {"methods": [], "bits": [16], "models_dir": str(tmp_path / "models")},
        "baselines": {
            "methods": [TOY_METHOD.name],
            "bits": [8, 16],
            "models_dir": str(tmp_path / "baselines"),
            TOY_METHOD.name: {"scale": 2.0},
        },
    }


def test_a_registered_toy_method_and_dataset_go_through_every_step_to_the_report(
    tmp_path, registered
):
    prepared, tree_dir, s_path, gist = _data_steps(tmp_path)
    label_tree, ancestors = load_tree(tree_dir)
    assert label_tree == LabelTree.from_paths(TOY_LEAVES, root="shapes")
    assert label_tree.height == 3 and ancestors.shape == (48, 3)
    assert np.array_equal(load_smatrix(s_path).weights, layer_weights(3))

    fits = all_methods.planned_fits(_settings(tmp_path))
    assert [f.name for f in fits] == ["toy-rp-8", "toy-rp-16"]
    assert fits[1].params == {"scale": 2.0}
    assert fits[1].out_dir == tmp_path / "baselines" / "toy-rp" / "toy-rp-16"
    for fit in fits:
        fit_shallow.fit(fit, prepared_dir=prepared, smatrix_path=s_path, features_path=gist)
    hasher = load_hasher(fits[1].hasher_dir)
    assert (type(hasher).__name__, hasher.name, hasher.scale) == ("RandomSigns", "toy-rp", 2.0)
    assert json.loads(fits[1].record.read_text())["method"] == "toy-rp"
    run_id = json.loads(fits[1].run_ref.read_text())["run_id"]
    assert mlflow.MlflowClient().get_run(run_id).info.run_name == "toy-rp-16"

    results, report_path = tmp_path / "results", tmp_path / "results.md"
    eval_params = {"n": N, "wr_ns": [N], "curve_max": 36, "workers": 1, "report": report_path}
    metrics = score(
        fits,
        prepared_dir=prepared,
        smatrix_path=s_path,
        results_dir=results,
        eval_params=eval_params,
        features_path=gist,
    )
    _check_scores(metrics, results)
    _check_report(metrics, report_path.read_text())


def _check_scores(metrics: dict, results) -> None:
    """The toy's rows in metrics.json and table.md, its codes on the toy tree, its curves."""
    assert set(metrics) == {"toy-rp", "random"}
    assert set(metrics["toy-rp"]) == {"8", "16"}
    row = metrics["toy-rp"]["16"]
    assert 0 < row[f"ndcg@{N}"] <= 1 and row[f"acg@{N}"] > 0
    assert json.loads((results / "metrics.json").read_text()) == metrics
    table_row = next(
        line
        for line in (results / "table.md").read_text().splitlines()
        if "| toy-rp | 16 |" in line
    )
    assert f"{row[f'acg@{N}']:.4f}" in table_row
    codes = load_codes(results / "codes" / "toy-rp-16.npz")
    assert codes.n_bits == 16 and codes.db_ancestors.shape == (36, 3)
    curves, dataset, n = load_curves(results / "curves.npz")
    assert {("toy-rp", 8), ("toy-rp", 16)} <= set(curves) and (dataset, n) == (TOY_DATASET, N)
    assert (results / "plots" / "wr_at_n-8.png").is_file()


def _check_report(metrics: dict, text: str) -> None:
    """The report names the toy dataset and has the toy's rows and figures; the toy is in the
    shallow group of the claims, so that a deep method's report row is its gain over the toy
    (the best, here the only, shallow method)."""
    assert f"### This run: {TOY_DATASET}, @{N}" in text
    assert any(line.startswith(f"| {TOY_METHOD.title} | ") for line in text.splitlines())
    assert "wr_at_n-16.png" in text
    groups = {name: (better, worse) for name, better, worse in report.claims()}
    assert "toy-rp" in groups["best deep over best shallow"][1]
    deep = {"16": {f"acg@{N}": 2 * metrics["toy-rp"]["16"][f"acg@{N}"]}}
    doc = report.results_doc({**metrics, "dpsh": deep}, dataset=TOY_DATASET, n=N)
    assert "| best deep over best shallow | ACG | - / +100.0% |" in doc


def test_the_registration_is_gone_after_the_test():
    assert TOY_METHOD.name not in method_catalogue.by_name()
    assert TOY_DATASET not in dataset_catalogue.DATASETS
    assert TOY_HASHER_MODULE not in sys.modules
    assert "toy-rp" not in report.claims()[-1][2]


def test_a_registered_method_is_labelled_with_its_title(registered):
    doc = report.results_doc({"toy-rp": {"16": {f"acg@{N}": 0.5}}}, dataset=TOY_DATASET, n=N)
    assert f"| {TOY_METHOD.title} |" in doc


def test_a_methods_settings_section_is_its_settings_with_their_checks():
    """params.yaml's sub-section of a method (baselines.toy-rp) is made from its declared
    settings dataclass, whose fields carry their checks and meanings: a method's settings are
    written once."""
    section = sections.method_section(TOY_METHOD)
    where = f"baselines.{TOY_METHOD.name}"
    assert parse_section(section, {}, where, "params.yaml").scale == ToySettings.scale
    assert parse_section(section, {"scale": 2.0}, where, "params.yaml").scale == 2.0
    with pytest.raises(
        ConfigError, match=r"params.yaml: baselines.toy-rp.scale: expected a number > 0"
    ):
        parse_section(section, {"scale": 0}, where, "params.yaml")


def test_a_setting_without_a_check_is_named_with_the_way_to_add_one():
    """A settings field declared without setting(...) is told by the method's name and the
    field, not by a bare KeyError when params.yaml is read."""

    @dataclasses.dataclass(frozen=True)
    class Unchecked:
        scale: float = 1.0

    bare = dataclasses.replace(TOY_METHOD, settings=Unchecked)
    with pytest.raises(TypeError, match=r"method 'toy-rp': Unchecked fields \['scale'\].*setting"):
        sections.method_section(bare)
