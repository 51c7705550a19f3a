"""One fit over two nodes, run as a Kubeflow Trainer TrainJob through the Kubeflow SDK's
container backend: the `trainjob` component's work (shdh.trainjob.launch) here, and one
container per node from the runtime image on a bridge network of the job's own, torchrun with
Gloo, one process a node. The nodes meet the step in a real S3 server (SeaweedFS) and log to a
real MLflow server, both listening where the bridge reaches the host.

- The two-node job trains the smoke fit with batch B a process; rank 0 alone opens an MLflow
  run and writes the model. Its losses match a one-process job with batch 2B (the same global
  batch) within the tolerances below: batch norm takes the global batch's statistics on the
  CPU too, and what is left is CNN-F's dropout, which each rank draws for its own half.
- A node container killed mid-run (SIGKILL, as a lost node) fails the job, and the step with
  the job's reason; the step run again resumes from the checkpoint rank 0 stored and ends with
  the uninterrupted job's weights, bit for bit.
"""

from __future__ import annotations

import json
import logging
import re
import subprocess
import threading
import time
from pathlib import Path

import mlflow
import numpy as np
import pytest
from kfp import dsl

from shdh import trainjob
from shdh.kubeflow import run_context
from shdh.tracking.mlflow_runs import PIPELINE_TAG
from tests.components.test_components import artifact, component, fit_inputs, gzip_mirror
from tests.conftest import write_fashion_mnist_raw
from tests.containers.conftest import pipeline_env
from tests.pipelines.front_doors import smoke_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FIT = "shdh-16"
# Enough epochs (~0.15 s each) for a node to be killed while the job is mid-run.
EPOCHS = 30
BATCH = 32  # a process's; the one-process job takes 2 x BATCH
# The global batch divides the training items: one process would take a last, partial batch,
# which several leave out (they gather codes of one shape), and the epochs' mean loss with it.
N_TRAIN = 8 * BATCH
# Two ranks with batch B against one process with 2B: the same steps up to the order of float
# sums, except for the dropout masks (each rank draws its own), whose difference grows over the
# epochs. Measured (AMD EPYC Zen 4, the runtime image): the first epochs 0.4% apart at most, the
# mean epoch loss 1.8%, the widest single epoch 8.8%.
FIRST_EPOCHS, FIRST_TOLERANCE = 3, 0.01
MEAN_TOLERANCE = 0.03
EPOCH_TOLERANCE = 0.15
RESTORED = re.compile(r"restored the checkpoint of epoch (\d+) from")
KILL_TIMEOUT_S = 300


@pytest.fixture(scope="module")
def job(runtime_image, mlflow_server, s3_server, tmp_path_factory):
    """Inputs from the components (prepare, tree, smatrix), the step's environment and a
    launcher of the trainjob component with the container backend."""
    tmp = tmp_path_factory.mktemp("trainjob")
    params = smoke_settings(["shdh"])
    params["data"].update(
        sources=[str(gzip_mirror(write_fashion_mnist_raw(tmp / "raw"), tmp / "mirror"))],
        verify=False,
    )
    params["train"].update(epochs=EPOCHS, batch_size=BATCH, n_train=N_TRAIN, num_threads=1, nodes=2)
    prepared, similarity = fit_inputs(tmp, params)
    env = {
        **pipeline_env(mlflow_server, s3_server, "checkpoints-trainjob", "shdh-trainjob"),
        trainjob.BACKEND_ENV: "container",
        "HOME": str(tmp / "home"),  # the SDK keeps each job's host folder under ~/.kubeflow
    }
    return {
        "tmp": tmp,
        "params": params,
        "prepared": prepared,
        "similarity": similarity,
        "env": env,
        "image": runtime_image,
    }


def launch(job, monkeypatch, run_id: str, **train) -> Path:
    """The trainjob component's function, as the DAG calls it (the parent run opened first,
    as the start step opens it)."""
    for key, value in job["env"].items():
        monkeypatch.setenv(key, value)
    settings = {**job["params"]["train"], **train}
    run_context(job["prepared"].metadata, "smoke", run_id, {"seed": 0})
    model = artifact(dsl.Model, job["tmp"] / f"{run_id}-model")
    component("trainjob").python_func(
        prepared=job["prepared"],
        similarity=job["similarity"],
        model=model,
        method="shdh",
        bits=16,
        own_seed=-1,
        settings=json.dumps(settings),
        seed=0,
        profile="smoke",
        pipeline_run_id=run_id,
        nodes=json.dumps({"image": job["image"], "gpu": False, "resources": {}}),
    )
    return Path(model.path)


@pytest.fixture(scope="module")
def two_nodes(job):
    with pytest.MonkeyPatch.context() as mp:
        start = time.monotonic()
        model = launch(job, mp, "run-two-nodes")
        print(f"two-node job: {time.monotonic() - start:.0f} s")
    return model


def history(model: Path) -> list[dict]:
    return json.loads((model / "history.json").read_text())


def weights(model: Path) -> dict[str, np.ndarray]:
    """The saved hasher's arrays: the network's weights and its code layout."""
    with np.load(model / "hasher" / "state.npz") as state:
        return {key: state[key] for key in state.files}


def test_the_two_node_job_trains_and_rank_0_alone_tracks_it(two_nodes, job, monkeypatch):
    assert [e["epoch"] for e in history(two_nodes)] == list(range(1, EPOCHS + 1))
    record = json.loads((two_nodes / "fit.json").read_text())
    assert (record["method"], record["bits"]) == ("shdh", 16)
    for key, value in job["env"].items():  # the server's address and credentials
        monkeypatch.setenv(key, value)
    client = mlflow.MlflowClient(job["env"]["MLFLOW_TRACKING_URI"])
    experiment = client.get_experiment_by_name(job["env"]["MLFLOW_EXPERIMENT_NAME"])
    fits = client.search_runs(
        [experiment.experiment_id], f"attributes.run_name = '{FIT}'", max_results=10
    )
    mine = [r for r in fits if r.data.tags.get(PIPELINE_TAG) == "run-two-nodes"]
    assert len(mine) == 1, [r.data.tags for r in fits]  # one run: rank 1 opened none
    losses = client.get_metric_history(mine[0].info.run_id, "loss")
    assert sorted(m.step for m in losses) == list(range(1, EPOCHS + 1))


def test_its_losses_match_one_process_with_the_doubled_batch(two_nodes, job, monkeypatch, caplog):
    caplog.set_level(logging.INFO, logger="shdh.tracking.staging")
    one = launch(job, monkeypatch, "run-one-process", nodes=1, batch_size=2 * BATCH)
    # Another run of the same data: the two-node job's run staged its inputs already.
    assert caplog.text.count("not uploaded again") == 2, caplog.text
    ones = [e["loss"] for e in history(one)]
    twos = [e["loss"] for e in history(two_nodes)]
    assert len(ones) == len(twos) == EPOCHS
    assert twos[:FIRST_EPOCHS] == pytest.approx(ones[:FIRST_EPOCHS], rel=FIRST_TOLERANCE)
    assert np.mean(twos) == pytest.approx(np.mean(ones), rel=MEAN_TOLERANCE)
    assert twos == pytest.approx(ones, rel=EPOCH_TOLERANCE)


def test_a_killed_node_fails_the_job_and_the_rerun_resumes_bit_for_bit(
    two_nodes, job, monkeypatch, s3_server, capfd
):
    run_id = "run-killed"
    name = trainjob.job_name(run_id, FIT)
    failure: list[BaseException] = []

    def first_try():
        try:
            launch(job, monkeypatch, run_id)
        except BaseException as exc:  # noqa: BLE001 (the failure is what is tested)
            failure.append(exc)

    thread = threading.Thread(target=first_try)
    thread.start()
    epoch = wait_for_stored_epoch(s3_server, job, run_id)
    subprocess.run(["docker", "kill", f"{name}-node-1"], check=True, capture_output=True)
    thread.join(timeout=KILL_TIMEOUT_S)
    assert not thread.is_alive()
    assert failure and isinstance(failure[0], trainjob.TrainJobError), failure
    assert "Failed" in str(failure[0]) and "node-1" in str(failure[0])
    capfd.readouterr()

    resumed = launch(job, monkeypatch, run_id)
    restored = [int(e) for e in RESTORED.findall(capfd.readouterr().out)]
    assert restored and epoch <= restored[0] < EPOCHS, restored
    assert history(resumed)[-1]["loss"] == history(two_nodes)[-1]["loss"]
    for key, value in weights(two_nodes).items():
        np.testing.assert_array_equal(weights(resumed)[key], value, err_msg=key)
    left = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"name={name}"], capture_output=True, text=True
    )
    assert left.stdout.strip() == ""  # the step deletes its job's containers


def wait_for_stored_epoch(server, job, run_id: str) -> int:
    """The first epoch whose checkpoint rank 0 put in the store (object metadata `epoch`)."""
    from botocore.exceptions import ClientError

    url = job["env"]["SHDH_CHECKPOINT_URL"].removeprefix("s3://")
    bucket, _, prefix = url.partition("/")
    deadline = time.monotonic() + KILL_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            head = server.client().head_object(
                Bucket=bucket, Key=f"{prefix}/{run_id}/{FIT}/checkpoint.pt"
            )
            return int(head["Metadata"]["epoch"])
        except ClientError:
            time.sleep(0.2)
    raise AssertionError("no epoch's checkpoint reached the store")
