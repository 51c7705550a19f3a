"""`dvc repro` and `dvc exp run` on the smoke profile, in a fresh copy of the repository.

This is what a new user does after cloning: fetch the raw data, reproduce the pipeline, change
one parameter. It runs the real DVC, the real `shdh` command and MLflow on SQLite.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.e2e.clone import clone_repo, sh

pytestmark = pytest.mark.slow
DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
SMOKE_REFERENCE = Path(__file__).with_name("smoke_metrics.json")


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A copy of the repository as git would clone it, on the smoke profile, data fetched."""
    if not DEBIAN_DIR.is_dir():
        pytest.fail(f"{DEBIAN_DIR} is missing: run `make data` (installs dataset-fashion-mnist)")
    dest = tmp_path_factory.mktemp("clone") / "shdh"
    env = clone_repo(dest)
    env["SHDH_CACHE_DIR"] = str(dest.parent / "cache")  # its own: what this run stored alone
    sh(["shdh", "profile", "apply", "smoke"], dest, env)
    sh(["shdh", "fetch"], dest, env)
    return dest, env


def test_dvc_repro_runs_every_stage(clone):
    dest, env = clone
    out = sh(["dvc", "repro"], dest, env)
    stages = (
        "prepare",
        "tree",
        "smatrix",
        "features",
        "train@shdh",
        "train@dpsh",
        "baselines",
        "evaluate",
        "register",
        "index",
    )
    for stage in stages:
        assert f"Running stage '{stage}'" in out
    _the_index_holds_the_champions_codes(dest)
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
    # evaluate encoded each model's queries and database once, and the index stage read the
    # champion's database codes back from what evaluate stored, not encoding them a third time
    entries = list((Path(env["SHDH_CACHE_DIR"]) / "codes").glob("*.npz"))
    assert len(entries) == 2 * (len(metrics) - 1), sorted(e.name for e in entries)
    _same_as_the_reference(results / "metrics.json")
    assert "# Results: fashion-mnist-h" in (results / "report.md").read_text()
    for published in ("results/metrics.json", "results/table.md", "docs/results.md"):
        assert (dest / published).read_bytes() == (REPO / published).read_bytes(), published
    shown = sh(["dvc", "metrics", "show", "--json"], dest, env)
    assert "ndcg@100" in shown
    # A second repro has nothing to do but the stage that rereads the unlisted inputs, which
    # runs every time (always_changed) and leaves its records as they were.
    again = sh(["dvc", "repro"], dest, env)
    assert set(re.findall(r"Running stage '([^']+)'", again)) == {"inputs"}, again
    assert "didn't change" in again


def _the_index_holds_the_champions_codes(dest: Path) -> None:
    """The index stage ran after register: it encoded the database with the version that
    register recorded, and answers a query by item id with that item first. Neither record
    holds what changes from run to run of the same pipeline (a run id, a time), which would
    leave dvc.lock modified after a fresh clone's `make run`."""
    from shdh.ranking.search_index import SearchIndex

    registered = json.loads((dest / "artifacts" / "register" / "registered.json").read_text())
    index = SearchIndex.load(dest / "artifacts" / "index")
    encoder = index.record["encoder"]
    assert (encoder["name"], encoder["alias"]) == ("shdh-encoder", "champion")
    assert (encoder["version"], encoder["run_id"]) == (registered["version"], None)
    assert set(registered) == {"name", "version", "alias", "run_name", "metric", "value"}
    assert "created" not in index.record
    first = int(index.item_ids[0])
    hits = index.search_ids([first], k=5)[0]
    assert hits[0].distance == 0 and first in {hit.item_id for hit in hits if hit.distance == 0}


def _same_as_the_reference(metrics: Path) -> None:
    """The smoke profile run from scratch (no checkpoint, no cache: a fresh clone) gives the
    committed metrics byte for byte, on any CPU (shdh.runtime.instruction_set).
    SMOKE_REFERENCE=write stores this run's file as the reference instead, after a change that moves
    the numbers on purpose."""
    if os.environ.get("SMOKE_REFERENCE") == "write":
        shutil.copyfile(metrics, SMOKE_REFERENCE)
    assert SMOKE_REFERENCE.is_file(), (
        f"{SMOKE_REFERENCE} is missing: run with SMOKE_REFERENCE=write"
    )
    assert metrics.read_bytes() == SMOKE_REFERENCE.read_bytes(), (
        f"the smoke profile's {metrics.name} differs from {SMOKE_REFERENCE}"
    )


def test_queued_experiments_track_into_the_repositorys_own_store(clone):
    """An experiment with a changed parameter, queued and run by DVC's queue worker: only the
    stages that read the parameter rerun, in DVC's temporary copy (.dvc/tmp/exps), which DVC
    deletes; yet its pipeline run, with a run per method, lands in the repository's default
    store, mlflow.db. (Two such writers at once, `-j 2`: test_tracking's
    test_concurrent_writers_from_temp_workspaces_lose_nothing; one experiment here keeps this
    test to what only the real queue shows.)"""
    import time

    import mlflow

    dest, env = clone
    env = {k: v for k, v in env.items() if k != "MLFLOW_TRACKING_URI"}  # the default store
    sh(["dvc", "repro"], dest, env)  # the baseline: the queued run retrains SHDH only
    name, alpha = "alpha-quarter", "0.25"
    sh(["dvc", "exp", "run", "--queue", "-n", name, "-S", f"train.shdh.alpha={alpha}"], dest, env)
    start = time.monotonic()
    out = sh(["dvc", "exp", "run", "--run-all"], dest, env)
    print(f"a queued smoke experiment: {time.monotonic() - start:.0f} s")
    sh(["dvc", "queue", "stop", "--kill"], dest, env)  # a worker may linger once the queue is empty
    assert "Running stage 'train@shdh'" in out and "Failed" not in out
    # Only the method whose setting changed and what follows it rerun: the rest is cached.
    for cached in ("prepare", "smatrix", "features", "train@dpsh", "baselines"):
        assert f"Running stage '{cached}'" not in out
    assert not list((dest / ".dvc" / "tmp").rglob("mlflow.db"))
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{dest / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("shdh")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    parents = {
        r.data.tags.get("dvc.exp_name"): r
        for r in runs
        if r.data.tags.get("shdh.role") == "pipeline"
    }
    assert name in parents
    metrics = json.loads((dest / "results" / "metrics.json").read_text())
    expected = {f"{method}-16" for method in metrics}  # every method and the floor
    parent = parents[name]
    assert parent.info.status == "FINISHED" and parent.info.run_name == name
    assert parent.data.params["train.shdh.alpha"] == alpha
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
    assert {c.info.run_name for c in children} == expected
    assert all("ndcg_at_100" in c.data.metrics for c in children)
    shdh = next(c for c in children if c.info.run_name == "shdh-16")
    assert shdh.data.params["alpha"] == alpha  # the experiment's setting reached the fit
