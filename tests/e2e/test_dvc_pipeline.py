"""`dvc repro` and `dvc exp run` on the smoke profile, in a fresh copy of the repository.

This is what a new user does after cloning: fetch the raw data, reproduce the pipeline, change
one parameter. It runs the real DVC, the real `shdh` command and MLflow on SQLite.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from shdh.fitting import HASHER_DIR
from tests.conftest import REPO

pytestmark = pytest.mark.slow
DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")


def sh(cmd: list[str], cwd: Path, env: dict[str, str]) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


@pytest.fixture(scope="module")
def clone(tmp_path_factory):
    """A copy of the repository as git would clone it: tracked and new files, nothing ignored."""
    if not DEBIAN_DIR.is_dir():
        pytest.fail(f"{DEBIAN_DIR} is missing: run `make data` (installs dataset-fashion-mnist)")
    dest = tmp_path_factory.mktemp("clone") / "shdh"
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    for name in filter(None, files):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "MLFLOW_TRACKING_URI": f"sqlite:///{dest / 'mlflow.db'}",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    sh(["git", "init", "-q"], dest, env)
    sh(["git", "add", "-A"], dest, env)
    sh(["git", "commit", "-q", "-m", "clone"], dest, env)
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
    metrics = json.loads((dest / "results" / "metrics.json").read_text())
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


def test_every_stage_runs_on_a_generated_folder_dataset(clone):
    """The user's own data: a folder tree with leaves at two depths, selected in params.yaml."""
    from shdh.data.folder import make_demo_folder

    dest, env = clone
    make_demo_folder(dest / "photos", n_per_leaf=40)
    # One deep and one shallow method: every kind of stage runs, at a third of the cost.
    out = sh(["dvc", "exp", "run", "-S", "data.dataset=folder", "-S", "data.raw_dir=photos",
              "-S", "data.max_items=null", "-S", "train.methods=[shdh]",
              "-S", "baselines.methods=[ksh+h]"], dest, env)  # fmt: skip
    for stage in ("download", "tree", "smatrix", "features", "train@shdh",
                  "baselines", "evaluate"):  # fmt: skip
        assert f"Running stage '{stage}'" in out
    tree = json.loads((dest / "artifacts" / "tree" / "tree.json").read_text())
    assert tree["names"][0] == "photos" and len(tree["names"]) == 1 + 2 + 4 + 4
    metrics = json.loads((dest / "results" / "metrics.json").read_text())
    assert metrics["shdh"]["16"]["ndcg@100"] > metrics["random"]["16"]["ndcg@100"]
    results_doc = (dest / "docs" / "results.md").read_text()
    assert "| SHDH |" in results_doc and "The paper (Table 1, CIFAR-100)" in results_doc


def test_queued_experiments_track_into_the_repositorys_own_store(clone):
    """Two experiments queued and run two at a time: their stages run in DVC's temporary
    copies (.dvc/tmp/exps), which DVC deletes, yet both pipeline runs, each with a run per
    method, land in the repository's default store, mlflow.db, written concurrently."""
    import time

    import mlflow

    dest, env = clone
    env = {k: v for k, v in env.items() if k != "MLFLOW_TRACKING_URI"}  # the default store
    sh(["dvc", "repro"], dest, env)  # the baseline: the queued runs retrain SHDH only
    names = {"alpha-quarter": "0.25", "alpha-three-quarters": "0.75"}
    for name, alpha in names.items():
        sh(["dvc", "exp", "run", "--queue", "-n", name, "-S", f"train.shdh.alpha={alpha}"],
           dest, env)  # fmt: skip
    start = time.monotonic()
    out = sh(["dvc", "exp", "run", "--run-all", "-j", "2"], dest, env)
    print(f"two queued smoke experiments, -j 2: {time.monotonic() - start:.0f} s")
    assert "Running stage 'train@shdh'" in out and "Failed" not in out
    assert not list((dest / ".dvc" / "tmp").rglob("mlflow.db"))
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{dest / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("shdh")
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    parents = {r.data.tags.get("dvc.exp_name"): r for r in runs
               if r.data.tags.get("shdh.role") == "pipeline"}  # fmt: skip
    assert set(names) <= set(parents)
    metrics = json.loads((dest / "results" / "metrics.json").read_text())
    expected = {f"{method}-16-seed0" for method in metrics}  # every method and the floor
    for name, alpha in names.items():
        parent = parents[name]
        assert parent.info.status == "FINISHED" and parent.info.run_name == name
        assert parent.data.params["train.shdh.alpha"] == alpha
        children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id]
        assert {c.info.run_name for c in children} == expected
        assert all("ndcg_at_100" in c.data.metrics for c in children)
