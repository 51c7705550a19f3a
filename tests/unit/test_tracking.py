"""Tracking: where runs go, metric names, and failing fast on an unreachable server."""

from __future__ import annotations

import os
import socket
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from shdh.core.metrics import Curves
from shdh.reporting import parent_summary
from shdh.reporting.figures import save_curves
from shdh.tracking import mlflow_runs as tracking
from shdh.tracking import parent_run
from tests.conftest import REPO


def test_default_uri_is_sqlite_unless_the_environment_names_one(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    monkeypatch.delenv("DVC_ROOT", raising=False)
    assert tracking.tracking_uri() == f"sqlite:///{Path.cwd().resolve() / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.example:5000")
    assert tracking.tracking_uri() == "http://mlflow.example:5000"
    for file_store in ("file:/tmp/mlruns", "./mlruns"):  # MLflow 3 takes no new runs there
        monkeypatch.setenv("MLFLOW_TRACKING_URI", file_store)
        with pytest.raises(ValueError, match=f"MLFLOW_TRACKING_URI={file_store}: a file store"):
            tracking.tracking_uri()


def test_metric_names_replace_at_sign():
    assert tracking.metric_key("ndcg@100") == "ndcg_at_100"
    assert tracking.metric_key("loss") == "loss"


def test_unreachable_server_fails_fast_and_names_the_uri(monkeypatch):
    with socket.socket() as sock:  # a port that nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    uri = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    start = time.monotonic()
    with pytest.raises(tracking.TrackingUnavailableError, match=uri):
        with tracking.run(run_name="x"):
            pass
    assert time.monotonic() - start < 30


@pytest.mark.slow  # a fresh MLflow store: its schema migrations take seconds
def test_run_logs_params_metrics_and_reopens_by_id(tmp_path):
    import mlflow

    with tracking.run(
        run_name="r", params={"bits": 64, "bits_list": [32, 64]}, tags={"method": "shdh"}
    ) as active:
        tracking.log_metrics({"acg@100": 1.5}, step=1)
        tracking.save_run_ref(tmp_path / "ref.json", active)
    run_id = tracking.load_run_ref(tmp_path / "ref.json")
    assert run_id == active.info.run_id
    with tracking.run(run_name="ignored", run_id=run_id):
        tracking.log_metrics({"ndcg@100": 0.9})
    run = mlflow.MlflowClient().get_run(run_id)
    assert run.data.params == {"bits": "64", "bits_list": "[32, 64]"}
    assert run.data.metrics == {"acg_at_100": 1.5, "ndcg_at_100": 0.9}
    assert run.data.tags["method"] == "shdh"


@pytest.mark.slow  # a fresh MLflow store: its schema migrations take seconds
def test_run_ref_from_another_tracking_store_is_not_reused(tmp_path, monkeypatch):
    with tracking.run(run_name="r") as active:
        tracking.save_run_ref(tmp_path / "ref.json", active)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'other.db'}")
    assert tracking.load_run_ref(tmp_path / "ref.json") is None
    assert tracking.load_run_ref(tmp_path / "missing.json") is None


def test_default_store_is_in_the_repository_a_dvc_temp_workspace_came_from(tmp_path, monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    monkeypatch.delenv("DVC_ROOT", raising=False)
    repo = tmp_path / "repo"
    temp = repo / ".dvc" / "tmp" / "exps" / "tmpab12cd"
    temp.mkdir(parents=True)
    monkeypatch.chdir(repo)
    assert tracking.tracking_uri() == f"sqlite:///{repo / 'mlflow.db'}"
    # A queued experiment's stage: DVC_ROOT names the original repository.
    monkeypatch.chdir(temp)
    monkeypatch.setenv("DVC_ROOT", str(repo))
    assert tracking.tracking_uri() == f"sqlite:///{repo / 'mlflow.db'}"
    # Without DVC_ROOT, a folder inside DVC's temporary workspaces still maps back.
    monkeypatch.delenv("DVC_ROOT")
    assert tracking.tracking_uri() == f"sqlite:///{repo / 'mlflow.db'}"
    # A relative SQLite URI is anchored there too; an absolute one and a server are kept.
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:///runs/team.db")
    assert tracking.tracking_uri() == f"sqlite:///{repo / 'runs' / 'team.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'a.db'}")
    assert tracking.tracking_uri() == f"sqlite:///{tmp_path / 'a.db'}"


def test_metric_keys_read_alike_across_methods_and_runs_carry_the_seed_as_a_tag():
    assert tracking.metric_key("ksh+h") == "ksh_h"  # MLflow refuses '+' in a key
    # A run is named as its fit (shdh.plan.fits.fit_name: the seed only with a `seeds` list), so
    # the seed it used is always a tag, which the comparison view groups by.
    assert tracking.method_tags("ksh+h", 16, 0) == {"method": "ksh+h", "bits": "16", "seed": "0"}


def test_the_commit_is_gits_head_in_a_checkout_and_unknown_outside_one(tmp_path, monkeypatch):
    monkeypatch.delenv(tracking.GIT_COMMIT_ENV, raising=False)
    monkeypatch.chdir(REPO)
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert len(head) == 40 and tracking.git_commit() == head
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path.parent))
    assert tracking.git_commit() == "unknown"


def test_the_experiment_is_a_model_training_one_with_artifacts_beside_the_store(monkeypatch):
    import mlflow

    monkeypatch.setenv("MLFLOW_EXPERIMENT_NAME", "shdh-mine")
    monkeypatch.setenv(tracking.GIT_COMMIT_ENV, "a" * 40)  # as an image records its commit
    with tracking.run(run_name="r", tags={"method": "shdh"}) as active:
        tracking.log_artifact(tracking.__file__)
    experiment = mlflow.MlflowClient().get_experiment(active.info.experiment_id)
    assert experiment.name == "shdh-mine"
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    beside = Path(tracking.tracking_uri().removeprefix("sqlite:///")).parent / "mlruns"
    assert experiment.artifact_location == beside.as_uri()
    run = mlflow.MlflowClient().get_run(active.info.run_id)
    assert run.data.tags["mlflow.source.git.commit"] == "a" * 40
    assert run.data.tags["mlflow.source.type"] == "LOCAL"
    assert beside.is_dir()


def test_parent_run_lives_from_the_first_step_to_evaluate_and_fails_with_a_step(tmp_path):
    import mlflow

    from shdh.tracking import parent_run

    settings = {"train": {"epochs": 1, "bits": [16]}, "baselines": {"ksh+h": {"n_anchors": 5}}}
    context = parent_run.pipeline_context("p1", {"profile": "smoke"}, settings)
    parent = context["parent_run_id"]
    client = mlflow.MlflowClient()
    opened = client.get_run(parent)
    assert opened.info.status == "RUNNING"
    assert opened.data.params == {
        "train.epochs": "1",
        "train.bits": "[16]",
        "baselines.ksh_h.n_anchors": "5",
    }
    with pytest.raises(RuntimeError, match="boom"):
        with tracking.run(run_name="shdh-16-seed0", parent_run_id=parent):
            raise RuntimeError("boom")
    assert client.get_run(parent).info.status == "FAILED"
    # A Kubeflow training task that starts after its sibling failed leaves it FAILED...
    parent_run.pipeline_context("p1", {"profile": "smoke"}, None, reopen=False)
    assert client.get_run(parent).info.status == "FAILED"
    # ...a rerun of the same pipeline run reopens the same parent, RUNNING again.
    again = parent_run.pipeline_context("p1", {"profile": "smoke"}, settings)
    assert again["parent_run_id"] == parent
    assert client.get_run(parent).info.status == "RUNNING"
    results = tmp_path / "results"
    (results / "plots").mkdir(parents=True)
    (results / "table.md").write_text(
        "| method | bits | NDCG@100 |\n|---|---:|---:|\n| shdh | 16 | 0.5 |\n"
    )
    (results / "metrics.json").write_text('{"ksh+h": {"16": {"ndcg@100": 0.25, "seeds": 2}}}')
    save_curves(results / "curves.npz", {("ksh+h", 16): tiny_curves()}, dataset="toy", n=100)
    # Fig. 5 of a separate sweep: not this run's, so not on its parent
    (results / "plots" / "alpha.png").write_bytes(b"png")
    (tmp_path / "results.md").write_text("# Results\n")
    view = parent_summary.summarize(parent, results, tmp_path / "results.md")
    tracking.end_parent(parent)
    done = client.get_run(parent)
    assert done.info.status == "FINISHED"
    note = done.data.tags["mlflow.note.content"]
    assert "| shdh | 16 | 0.5 |" in note
    # The UI's view of the methods compared: saved on the experiment, linked from the note.
    experiment = done.info.experiment_id
    assert view == (
        f"http://127.0.0.1:5000/#/experiments/{experiment}/runs"
        "?viewStateShareKey=shdh-p1&compareRunsMode=CHART"
    )
    assert f"]({view[view.index('#') :]})" in note
    tags = client.get_experiment(experiment).tags
    assert "mlflow.sharedViewState.shdh-p1" in tags
    assert done.data.metrics == {}  # the scores are the method runs' metrics
    listed = {
        a.path for d in ("figures", "report", "results") for a in client.list_artifacts(parent, d)
    }
    assert listed == {
        "figures/wr_by_radius-16.png",
        "figures/wr_at_n-16.png",
        "figures/wr_vs_bits.png",
        "report/report.html",
        "results/table.md",
        "results/metrics.json",
    }
    page = client.download_artifacts(parent, "report/report.html", str(tmp_path))
    text = Path(page).read_text()
    assert text.count('<img src="data:image/png;base64,') == 3
    assert "<td>ksh+h</td><td>16</td>" in text and "NDCG_list@100" in text
    assert "<!--" not in text and "href=" not in text  # nothing outside the run


def tiny_curves() -> Curves:
    return Curves(
        wr_at_n=np.linspace(0.1, 0.5, 10),
        radius=np.arange(3),
        radius_real=np.arange(3, dtype=float),
        wr_at_radius=np.array([0.2, 0.5, 1.0]),
    )


def test_a_model_from_another_pipeline_run_gets_a_run_of_its_own(tmp_path):
    first = parent_run.pipeline_context("p1", {}, None)["parent_run_id"]
    second = parent_run.pipeline_context("p2", {}, None)["parent_run_id"]
    with tracking.run(run_name="shdh-16-seed0", parent_run_id=first) as active:
        tracking.save_run_ref(tmp_path / "ref.json", active)
    assert tracking.load_run_ref(tmp_path / "ref.json", first) == active.info.run_id
    assert tracking.load_run_ref(tmp_path / "ref.json", second) is None


WRITER = """
import sys
from shdh.tracking import parent_run
from shdh.tracking import mlflow_runs as tracking
name, n_runs, n_metrics = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
parent = parent_run.pipeline_context(name, {}, {"train": {"epochs": 1}})["parent_run_id"]
for r in range(n_runs):
    with tracking.run(run_name=f"{name}-{r}", parent_run_id=parent, params={"r": r}):
        for step in range(n_metrics):
            tracking.log_metrics({"loss": step}, step=step)
"""


def test_concurrent_writers_from_temp_workspaces_lose_nothing(tmp_path, monkeypatch):
    """Two queued experiments (`-j 2`) writing at once into a fresh store, each from a DVC temporary
    workspace: one store in the original repository, every run and metric in it."""
    import subprocess
    import sys

    import mlflow

    repo = tmp_path / "repo"
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    writers = []
    for i in range(2):
        temp = repo / ".dvc" / "tmp" / "exps" / f"tmp{i}"
        temp.mkdir(parents=True)
        writers.append(
            subprocess.Popen(
                [sys.executable, "-c", WRITER, f"exp{i}", "3", "20"],
                cwd=temp,
                env={**env, "DVC_ROOT": str(repo)},
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    for writer in writers:
        _, err = writer.communicate(timeout=600)
        assert writer.returncode == 0, err[-3000:]
    assert not list(repo.glob(".dvc/tmp/exps/*/mlflow.db"))
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{repo / 'mlflow.db'}")
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{repo / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("shdh")
    runs = client.search_runs([experiment.experiment_id], max_results=100)
    parents = [r for r in runs if r.data.tags.get(tracking.ROLE_TAG) == "pipeline"]
    children = [r for r in runs if tracking.PARENT_TAG in r.data.tags]
    assert len(parents) == 2 and len(children) == 6
    for child in children:
        history = client.get_metric_history(child.info.run_id, "loss")
        assert [m.step for m in history] == list(range(20))
