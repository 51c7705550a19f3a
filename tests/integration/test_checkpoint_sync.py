"""Preemption-safe training against a real S3 server (SeaweedFS): the train component keeps
each epoch's checkpoint in the object store, and a task killed mid-fit and run again resumes
from there and ends with the codes of a fit that was never interrupted.

The killed fit runs in a subprocess that pauses after its first epoch (the test wraps the
epoch logger there), so the kill lands mid-fit on every machine: SIGKILL, as the kubelet does
to an evicted pod, once that epoch's checkpoint is in the store.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import mlflow
import numpy as np
import pytest
from kfp import dsl

from shdh.hashers import load_hasher
from shdh.kubeflow import pipeline_arguments
from shdh.tracking.checkpoint_sync import STORE_ENV, CheckpointStoreError
from tests.components.test_components import artifact, component, fit_inputs, gzip_mirror
from tests.conftest import REPO, write_fashion_mnist_raw
from tests.pipelines.front_doors import smoke_settings

pytestmark = pytest.mark.integration

FIT = "shdh-16"  # the fit's name (shdh.plan.fits.fit_name): no `seeds` list, no seed in it
EPOCHS = 3
KILL_TIMEOUT_S = 120.0
# The child: the train component with its first epoch's logging held up, so the kill lands
# after that epoch's checkpoint was written and handed to the uploader, and before the next.
CHILD = """
import json, sys, time
from pathlib import Path
from kfp import dsl
import shdh.steps.fit as runner

args = json.loads(sys.argv[1])
logger = runner.epoch_logger

def held_after_first_epoch(name, epochs, **kwargs):
    log = logger(name, epochs, **kwargs)
    def on_epoch(entry):
        log(entry)
        if entry["epoch"] == 1:
            Path(args["marker"]).touch()
            time.sleep(600)
    return on_epoch

runner.epoch_logger = held_after_first_epoch
from shdh.kfp.components.train import train
art = {k: dsl.Dataset(name=k, uri=v["uri"], metadata=v["metadata"]) for k, v in args["in"].items()}
train.python_func(model=dsl.Model(name="model", uri=args["model"]), **art, **args["params"])
"""


@pytest.fixture(scope="module")
def inputs(tmp_path_factory, s3_server):
    """The prepared dataset (300 items) and its S-matrix, from the components, and the settings
    of a tiny fit: width 0.0625, 3 epochs, one torch thread (so runs agree bit for bit)."""
    tmp = tmp_path_factory.mktemp("checkpoints")
    params = smoke_settings()
    params["data"].update(
        sources=[str(gzip_mirror(write_fashion_mnist_raw(tmp / "raw"), tmp / "mirror"))],
        verify=False,
        max_items=None,
    )
    params["train"].update(methods=["shdh"], epochs=EPOCHS, num_threads=1)
    args = pipeline_arguments(params)
    prepared, similarity = fit_inputs(tmp, params)
    return {
        "tmp": tmp,
        "args": args,
        "prepared": prepared,
        "similarity": similarity,
        "store": f"s3://{s3_server.bucket}/checkpoints-{uuid.uuid4().hex[:8]}",
    }


def use_store(mp: pytest.MonkeyPatch, server, inputs) -> None:
    """The store and its server in the environment, as shdh-config and the Secret set them."""
    for name, value in server.env().items():
        mp.setenv(name, value)
    mp.setenv("AWS_ENDPOINT_URL", server.endpoint)
    mp.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    mp.delenv("AWS_PROFILE", raising=False)
    mp.setenv(STORE_ENV, inputs["store"])
    mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{inputs['tmp'] / 'mlflow.db'}")


@pytest.fixture
def store_env(s3_server, inputs, monkeypatch):
    use_store(monkeypatch, s3_server, inputs)
    return s3_server


@pytest.fixture(scope="module")
def uninterrupted(s3_server, inputs) -> np.ndarray:
    """The codes of the fit run once from start to end (through the store, too)."""
    with pytest.MonkeyPatch.context() as mp:
        use_store(mp, s3_server, inputs)
        whole = train_here(inputs, "run-whole", inputs["tmp"] / "whole")
    assert stored(s3_server, inputs, "run-whole", "checkpoint.pt")["Metadata"]["epoch"] == "3"
    return codes(whole, inputs)


def train_params(inputs, run_id: str, train: str | None = None) -> dict:
    return {
        "method": "shdh",
        "bits": 16,
        "own_seed": -1,
        "seed": 0,
        "profile": "smoke",
        "settings": train or inputs["args"]["train"],
        "pipeline_run_id": run_id,
    }


def train_here(inputs, run_id: str, out: Path, train: str | None = None) -> Path:
    model = artifact(dsl.Model, out)
    component("train").python_func(
        prepared=inputs["prepared"],
        similarity=inputs["similarity"],
        model=model,
        **train_params(inputs, run_id, train),
    )
    return Path(model.path)


def stored(server, inputs, run_id: str, name: str) -> dict | None:
    """The head of a stored training file, or None."""
    from botocore.exceptions import ClientError

    bucket, _, prefix = inputs["store"].removeprefix("s3://").partition("/")
    try:
        return server.client().head_object(Bucket=bucket, Key=f"{prefix}/{run_id}/{FIT}/{name}")
    except ClientError:
        return None


def codes(model_dir: Path, inputs) -> np.ndarray:
    from shdh.steps.prepare import load_prepared

    dataset, _ = load_prepared(inputs["prepared"].path)
    return load_hasher(model_dir / "hasher").encode(np.asarray(dataset.images))


def kill_after_first_epoch(inputs, run_id: str, server) -> int:
    """Run the child until epoch 1's files are in the store (the MLflow run reference is
    uploaded last), then SIGKILL it."""
    tmp = inputs["tmp"]
    marker = tmp / f"{run_id}.epoch1"
    payload = {
        "in": {
            k: {"uri": inputs[k].uri, "metadata": inputs[k].metadata}
            for k in ("prepared", "similarity")
        },
        "model": str(tmp / f"{run_id}-model"),
        "marker": str(marker),
        "params": train_params(inputs, run_id),
    }
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with open(tmp / f"{run_id}.log", "wb") as log:
        child = subprocess.Popen(
            [sys.executable, "-c", CHILD, json.dumps(payload)],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )
    deadline = time.monotonic() + KILL_TIMEOUT_S
    try:
        while not (marker.exists() and stored(server, inputs, run_id, "mlflow_run.json")):
            assert child.poll() is None, (tmp / f"{run_id}.log").read_text()[-3000:]
            assert time.monotonic() < deadline, "the first epoch's checkpoint never reached S3"
            time.sleep(0.2)
        assert child.poll() is None  # still mid-fit: held after epoch 1 of 3
        child.send_signal(signal.SIGKILL)
        return child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()


def test_a_killed_fit_resumes_from_the_store_with_the_codes_of_an_uninterrupted_one(
    store_env, inputs, uninterrupted, tmp_path, caplog
):
    assert kill_after_first_epoch(inputs, "run-killed", store_env) == -signal.SIGKILL
    head = stored(store_env, inputs, "run-killed", "checkpoint.pt")
    assert head["Metadata"]["epoch"] == "1"
    with caplog.at_level(logging.INFO):
        resumed = train_here(inputs, "run-killed", tmp_path / "resumed")
    assert f"restored the checkpoint of epoch 1 from {inputs['store']}/run-killed/{FIT}/" in (
        caplog.text
    )
    assert "from epoch 1" in caplog.text  # the training loop continued it
    history = json.loads((resumed / "history.json").read_text())
    assert [e["epoch"] for e in history] == [1, 2, 3]
    np.testing.assert_array_equal(codes(resumed, inputs), uninterrupted)
    assert stored(store_env, inputs, "run-killed", "checkpoint.pt")["Metadata"]["epoch"] == "3"
    # One MLflow run for the fit: the retry reopened the killed attempt's run.
    run_id = json.loads((resumed / "mlflow_run.json").read_text())["run_id"]
    losses = mlflow.MlflowClient().get_metric_history(run_id, "loss")
    assert sorted(m.step for m in losses) == [1, 2, 3]


def test_a_stored_checkpoint_of_other_settings_is_refused_and_named(
    store_env, inputs, uninterrupted, tmp_path, caplog
):
    other = json.loads(inputs["args"]["train"])
    other.update(lr=0.001, epochs=1)
    train_here(inputs, "run-shared", tmp_path / "other", json.dumps(other))
    with caplog.at_level(logging.INFO):
        fresh = train_here(inputs, "run-shared", tmp_path / "fresh")
    url = f"{inputs['store']}/run-shared/{FIT}/checkpoint.pt"
    refusals = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    named = [m for m in refusals if url in m and "refused" in m and "parameter 'loop.lr'" in m]
    assert named, refusals
    assert "restored the checkpoint" not in caplog.text and "resuming" not in caplog.text
    assert [e["epoch"] for e in json.loads((fresh / "history.json").read_text())] == [1, 2, 3]
    np.testing.assert_array_equal(codes(fresh, inputs), uninterrupted)
    assert stored(store_env, inputs, "run-shared", "checkpoint.pt")["Metadata"]["epoch"] == "3"


def test_a_missing_bucket_or_refused_keys_fail_before_training(
    store_env, inputs, tmp_path, monkeypatch
):
    monkeypatch.setenv(STORE_ENV, "s3://no-such-bucket/checkpoints")
    with pytest.raises(CheckpointStoreError, match="bucket 'no-such-bucket' does not exist"):
        train_here(inputs, "run-x", tmp_path / "x")
    monkeypatch.setenv(STORE_ENV, inputs["store"])
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(CheckpointStoreError, match="AWS_SECRET_ACCESS_KEY"):
        train_here(inputs, "run-y", tmp_path / "y")
