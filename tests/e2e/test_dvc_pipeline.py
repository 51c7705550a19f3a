"""`dvc repro` and `dvc exp run` on the smoke profile, in a fresh copy of the repository.

This is what a new user does after cloning: fetch the raw data, reproduce the pipeline, change
one parameter. It runs the real DVC, the real `shdh` command and MLflow on SQLite.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shdh.fitting import HASHER_DIR
from tests.conftest import REPO
from tests.e2e.clone import clone_repo, sh

pytestmark = pytest.mark.slow
DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A copy of the repository as git would clone it, on the smoke profile, data fetched."""
    if not DEBIAN_DIR.is_dir():
        pytest.fail(f"{DEBIAN_DIR} is missing: run `make data` (installs dataset-fashion-mnist)")
    dest = tmp_path_factory.mktemp("clone") / "shdh"
    env = clone_repo(dest)
    sh(["shdh", "profile", "apply", "smoke"], dest, env)
    sh(["shdh", "fetch"], dest, env)
    return dest, env


def test_dvc_repro_runs_every_stage(clone):
    dest, env = clone
    out = sh(["dvc", "repro"], dest, env)
    stages = (
        "download",
        "tree",
        "smatrix",
        "features",
        "train@shdh",
        "train@dpsh",
        "baselines",
        "evaluate",
    )
    for stage in stages:
        assert f"Running stage '{stage}'" in out
    # data.dvc matches the fetched raw files: the raw data is the same whatever the source.
    assert "data.dvc" not in sh(["dvc", "status"], dest, env)
    # the smoke profile's own folder: the project's published results/ stay as they are
    results = dest / "results" / "fashion-mnist-h" / "smoke"
    metrics = json.loads((results / "metrics.json").read_text())
    assert set(metrics) == {
        "shdh",
        "dpsh",
        "itq",
        "kmh",
        "ksh",
        "ksh+h",
        "lfh",
        "cosdish",
        "cosdish+h",
        "random",
    }
    assert "ndcg@100" in metrics["shdh"]["16"]
    assert "# Results: fashion-mnist-h" in (results / "report.md").read_text()
    for published in ("results/metrics.json", "results/table.md", "docs/results.md"):
        assert (dest / published).read_bytes() == (REPO / published).read_bytes(), published
    shown = sh(["dvc", "metrics", "show", "--json"], dest, env)
    assert "ndcg@100" in shown
    # A second repro has nothing to do.
    assert "didn't change" in sh(["dvc", "repro"], dest, env) or "up to date" in sh(
        ["dvc", "status"], dest, env
    )


def test_dvc_exp_run_with_a_changed_parameter(clone):
    dest, env = clone
    sh(["dvc", "repro"], dest, env)
    out = sh(["dvc", "exp", "run", "-S", "train.shdh.alpha=0.5"], dest, env)
    # Only the method whose setting changed and what follows it rerun: the rest is cached.
    assert "Running stage 'train@shdh'" in out and "Running stage 'evaluate'" in out
    for cached in ("download", "smatrix", "features", "train@dpsh", "baselines"):
        assert f"Running stage '{cached}'" not in out
    model = dest / "artifacts" / "models" / "shdh" / "shdh-16"
    assert json.loads((model / HASHER_DIR / "params.json").read_text())["params"]["alpha"] == 0.5
