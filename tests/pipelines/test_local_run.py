"""The whole Kubeflow DAG on the smoke profile with kfp.local: it produces the metrics that
`dvc repro` of the smoke profile does, and MLflow holds one parent run for it with a nested run
per method and code length, tagged as the DVC pipeline's runs are."""

from __future__ import annotations

import builtins
import json
import socket
import subprocess
import time
from pathlib import Path

import mlflow
import pytest
import yaml

from shdh.cli import main
from shdh.tracking import mlflow_runs as tracking
from tests.conftest import REPO
from tests.e2e.test_dvc_pipeline import SMOKE_REFERENCE  # what a fresh clone's `dvc repro` gives
from tests.pipelines.front_doors import smoke_settings

pytestmark = pytest.mark.slow
DEBIAN_DIR = Path("/usr/share/datasets/fashion-mnist")
# A deep method and a shallow one that reads the hierarchy: every kind of task, each method a kfp
# task of its own (the DAG wires every deep fit alike, and every shallow one). Each task is a
# process of some seven seconds here; the container tests run the DAG with both deep methods and
# a plain shallow one too, and tests/components runs every component function.
SMOKE_METHODS = {"shdh", "cosdish+h"}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One kfp.local run on smoke, into an MLflow store of its own."""
    from shdh.kfp import pipelines

    if not DEBIAN_DIR.is_dir():
        pytest.fail(f"{DEBIAN_DIR} is missing: run `make data` (installs dataset-fashion-mnist)")
    tmp = tmp_path_factory.mktemp("front-doors")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    params = smoke_settings(SMOKE_METHODS)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        mp.chdir(REPO)  # git commit and data.dvc, as a user runs it
        start = time.monotonic()
        kfp_run = pipelines.run_local(params, tmp / "kfp")
        kfp_seconds = time.monotonic() - start
    print(f"kfp.local smoke run: {kfp_seconds:.0f} s")
    return {"kfp": kfp_run, "uri": uri}


@pytest.fixture
def client(runs, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", runs["uri"])
    mlflow.set_tracking_uri(runs["uri"])
    return mlflow.MlflowClient()


def test_local_run_scores_every_method_and_writes_the_report(runs):
    kfp_run = runs["kfp"]
    assert set(kfp_run.metrics) == SMOKE_METHODS | {"random"}
    for method in SMOKE_METHODS:
        row = kfp_run.metrics[method]["16"]
        assert 0 < row["ndcg@100"] <= 1 and row["acg@100"] > 0, method
    assert (kfp_run.results_dir / "codes" / "shdh-16.npz").is_file()
    assert (kfp_run.results_dir / "plots" / "wr_at_n-16.png").is_file()
    assert "| shdh | 16 |" in kfp_run.table
    report = kfp_run.report.read_text()
    assert "This run: fashion-mnist-h, @100" in report and "| SHDH |" in report


def test_dvc_and_kubeflow_give_the_same_metrics(runs):
    """Same steps, same params, same seeds: every metric of every method is the one `dvc repro`
    gives, to the last bit. A method's fit and scores do not depend on the other methods of the
    run, so the subset here is compared with the reference's rows for it."""
    reference = json.loads(SMOKE_REFERENCE.read_text())
    assert runs["kfp"].metrics == {method: reference[method] for method in runs["kfp"].metrics}


def test_a_kubeflow_run_is_one_parent_with_a_nested_run_per_method(runs, client):
    exp = client.get_experiment_by_name(tracking.DEFAULT_EXPERIMENT)
    parents = client.search_runs(
        [exp.experiment_id], filter_string=f"tags.`{tracking.ROLE_TAG}` = 'pipeline'"
    )
    dvc_md5 = yaml.safe_load((REPO / "data.dvc").read_text())["outs"][0]["md5"]
    (kfp_parent,) = parents  # one for the run, keyed by the kfp.local job id
    children = client.search_runs(
        [exp.experiment_id],
        filter_string=f"tags.mlflow.parentRunId = '{kfp_parent.info.run_id}'",
    )
    names = {f"{m}-16" for m in SMOKE_METHODS} | {"random-16"}
    assert {c.info.run_name for c in children} == names
    for run in (kfp_parent, *children):
        tags = run.data.tags
        assert tags["dataset"] == "fashion-mnist-h" and tags["profile"] == "smoke"
        assert tags[tracking.PIPELINE_TAG] == kfp_parent.data.tags[tracking.PIPELINE_TAG]
        # The raw files, hashed by the download component as DVC hashes data/: data.dvc's md5.
        assert tags["dvc_data_md5"] == dvc_md5
    # The commit the components ran from: a commit of this repository, on every run, in
    # MLflow's own source tags; the parent is closed by evaluate.
    assert kfp_parent.info.status == "FINISHED"
    assert kfp_parent.data.tags["mlflow.source.type"] == "JOB"
    assert kfp_parent.data.params["train.epochs"] == "1"
    commit = kfp_parent.data.tags["mlflow.source.git.commit"]
    found = subprocess.run(["git", "cat-file", "-t", commit], cwd=REPO, capture_output=True)
    assert found.stdout.strip() == b"commit"
    for run in children:
        if run.info.run_name != "random-16":
            assert run.data.tags["mlflow.source.git.commit"] == commit
            assert "ndcg_at_100" in run.data.metrics and "fit_seconds" in run.data.metrics
    deep = [c for c in children if c.data.tags.get("method") == "shdh"]
    assert len(deep) == 1 and all(tracking.MODEL_URI_TAG in c.data.tags for c in deep)
    artifacts = [a.path for a in client.list_artifacts(kfp_parent.info.run_id, "report")]
    assert artifacts == ["report/report.html", "report/results.md"]


def test_run_local_fails_fast_naming_an_unreachable_tracking_server(monkeypatch, caplog):
    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    uri = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.chdir(REPO)
    start = time.monotonic()
    assert main(["pipeline", "run", "--local", "--profile", "smoke", "--root", "/nonexistent"]) == 1
    assert time.monotonic() - start < 30
    assert uri in caplog.text and "unreachable" in caplog.text


def test_run_local_puts_back_the_print_that_kfp_local_left_patched(monkeypatch, tmp_path):
    """kfp.local runs a ParallelFor's tasks in threads, each swapping builtins.print for an
    indenting wrapper; out-of-order restores can leave one installed (seen in the full suite,
    where numba then failed to import). Here a stand-in pipeline leaves it patched and fails."""
    from shdh.kfp.pipelines import local as pipelines_local

    def leaky_pipeline(**arguments):
        builtins.print = lambda *args, **kwargs: None  # what an interleaved restore leaves
        raise RuntimeError("task failed")

    monkeypatch.setattr(tracking, "check_server", lambda uri: None)
    monkeypatch.setattr(pipelines_local, "build_pipeline", lambda params: leaky_pipeline)
    monkeypatch.setattr(pipelines_local, "pipeline_arguments", lambda params: {})
    real_print = builtins.print
    try:
        with pytest.raises(RuntimeError, match="task failed"):
            pipelines_local.run_local({}, tmp_path)
        assert builtins.print is real_print
    finally:
        builtins.print = real_print
