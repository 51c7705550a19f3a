"""A new deep method is one file (tests/unit/toy_deep_method.py: its settings, its objective, its
class and its catalogue entry), registered here with no other edit: it trains, saves, loads and
encodes through the shared deep hasher and loop, has its section in params.yaml's schema, is
planned, is a stage of dvc.yaml whose code is its file, and is a task of the compiled pipeline.

The registration lasts one test (monkeypatch of shdh.hashers.method_catalogue.METHODS)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from shdh import settings
from shdh.cli import main
from shdh.core.level_weights import layer_weights
from shdh.core.metrics import evaluate
from shdh.hashers import hasher_class, load_hasher, method_catalogue
from shdh.hashers.supervision import PairSimilarity
from shdh.plan.all_methods import planned_fits
from shdh.ranking.exact import pack_codes
from shdh.runtime.errors import ConfigError
from shdh.settings.profiles import load_params
from tests import dvc_code_deps, import_graph
from tests.conftest import REPO
from tests.unit.toy_deep_method import TOY_DEEP, ToyDeep, ToyDeepSettings
from tests.unit.toys import TINY_NET, TREE, deep_hasher, tree_set

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture
def registered(monkeypatch):
    monkeypatch.setattr(method_catalogue, "METHODS", (*method_catalogue.METHODS, TOY_DEEP))


def _with_toy(**own) -> dict:
    params = load_params(REPO / "params.yaml")
    params["train"]["methods"] = ["shdh", TOY_DEEP.name]
    if own:
        params["train"][TOY_DEEP.name] = own
    return params


def test_it_trains_saves_loads_and_encodes_and_its_codes_rank(registered, tmp_path):
    cls = hasher_class(TOY_DEEP.name)
    assert cls is ToyDeep and cls.name == "toy-deep"
    _, images, anc = tree_set(seed=1, per_leaf=40)
    _, queries, q_anc = tree_set(seed=2, per_leaf=10)
    u = layer_weights(TREE.height)
    hasher = deep_hasher(cls, n_bits=16, seed=3, **{**TINY_NET, "epochs": 2}, target=0.5)
    hasher.fit(images, PairSimilarity(anc, u, "label"))
    assert hasher.settings == ToyDeepSettings(target=0.5)
    codes = hasher.encode(queries)
    loaded = load_hasher(hasher.save(tmp_path / "model"))
    assert type(loaded) is ToyDeep and loaded.settings == hasher.settings
    np.testing.assert_array_equal(loaded.encode(queries), codes)
    rng = np.random.default_rng(0)
    scores = {}
    for name, q, db in (
        ("toy", codes, hasher.encode(images)),
        ("random", rng.choice([-1, 1], codes.shape), rng.choice([-1, 1], (len(images), 16))),
    ):
        found, _ = evaluate(pack_codes(q), pack_codes(db), q_anc, anc, [16], [1.0], n=50)
        scores[name] = found["ndcg@50"]
    assert scores["toy"] > scores["random"] + 0.1, scores


def test_it_has_its_section_in_the_schema_and_is_planned(registered):
    checked = settings.validate(_with_toy(target=0.3))
    fits = [f for f in planned_fits(checked.params) if f.method == TOY_DEEP.name]
    assert [f.name for f in fits] == [f"toy-deep-{b}" for b in checked.params["train"]["bits"]]
    assert fits[0].params["settings"] == ToyDeepSettings(target=0.3)
    with pytest.raises(ConfigError, match=r"train\.toy-deep\.target: expected a number > 0"):
        settings.validate(_with_toy(target=0))
    with pytest.raises(ConfigError, match=r"unknown setting train\.toy-deep\.targte"):
        settings.validate(_with_toy(targte=0.3))


def test_without_its_registration_it_is_refused_by_name():
    with pytest.raises(ConfigError, match=r"train\.methods\[1\]: expected one of shdh, "):
        settings.validate(_with_toy())


@pytest.mark.slow
def test_it_is_a_dvc_stage_whose_code_is_its_file(registered, tmp_path):
    """DVC expands the train stage over train.methods; the stage's code, which the inputs stage
    hashes into its record, holds the toy's module, found through the catalogue."""
    shutil.copy(REPO / "dvc.yaml", tmp_path / "dvc.yaml")
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(_with_toy(), sort_keys=False))
    dvc = str(Path(sys.executable).with_name("dvc"))  # this venv's, whatever PATH holds
    subprocess.run([dvc, "init", "--no-scm", "-q"], cwd=tmp_path, check=True)
    listed = subprocess.run(
        [dvc, "stage", "list", "--name-only"],
        cwd=tmp_path,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    assert "train@toy-deep" in listed and "train@shdh" in listed
    packages = (*import_graph.PACKAGES, ("tests", "tests"))
    code = dvc_code_deps.stage_code_deps(REPO / "dvc.yaml", packages)
    assert "tests/unit/toy_deep_method.py" in code["train"]
    assert "tests/unit/toy_deep_method.py" in code["evaluate"]
    assert "tests/unit/toy_deep_method.py" not in code["baselines"]


def test_it_is_a_task_of_the_compiled_pipeline(registered, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    out = tmp_path / "pipeline.yaml"
    args = ["--profile", "smoke", "--set", "train.methods=[shdh, toy-deep]", "--out", str(out)]
    assert main(["pipeline", "compile", *args]) == 0
    spec = next(yaml.safe_load_all(out.read_text()))
    names = {
        task["taskInfo"]["name"]
        for dag in [spec["root"], *spec["components"].values()]
        for task in dag.get("dag", {}).get("tasks", {}).values()
    }
    assert {n for n in names if n.startswith("toy-deep-")}, sorted(names)
