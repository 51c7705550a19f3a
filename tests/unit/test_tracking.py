"""Tracking: where runs go, metric names, and failing fast on an unreachable server."""

from __future__ import annotations

import socket
import time

import pytest

from shdh import tracking


def test_default_uri_is_sqlite_unless_the_environment_names_one(monkeypatch):
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    assert tracking.tracking_uri() == "sqlite:///mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://mlflow.example:5000")
    assert tracking.tracking_uri() == "http://mlflow.example:5000"


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
