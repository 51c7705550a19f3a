"""Preemption for real: the train container killed mid-training, the task run again.

The DAG of one deep method runs through `shdh pipeline run --local --docker`, its train task in
the runtime image with its checkpoints going to a real S3 server (SHDH_CHECKPOINT_URL). Once
the first epoch's checkpoint is in the store, the container is killed (SIGKILL, as a node that
goes away); the run fails. The task is then run again as a retry runs it: the same image,
command, inputs and pipeline run id (taken from the killed container with `docker inspect`).
It must restore the stored checkpoint, so at most the epoch in progress is lost, and end with
the weights of an uninterrupted run of the same settings, bit for bit (CPU).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml

from shdh.config import deep_merge
from tests.conftest import REPO
from tests.containers.test_pipeline_in_containers import (
    mlflow_server,  # noqa: F401 (the module's MLflow server)
    pipeline_env,
    run_pipeline,
)
from tests.pipelines.front_doors import smoke_settings

pytestmark = [pytest.mark.integration, pytest.mark.slow]
EPOCHS = 3
STORED = re.compile(r"epoch (\d+)'s checkpoint is in (s3://\S+)")
RESTORED = re.compile(r"restored the checkpoint of epoch (\d+) from")
FIND_TIMEOUT_S = 900


def train_container(image: str, process: subprocess.Popen) -> str:
    """The id of the train task's container, once kfp.local has started it."""
    deadline = time.monotonic() + FIND_TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        ids = subprocess.run(
            ["docker", "ps", "-q", "--filter", f"ancestor={image}"],
            capture_output=True,
            text=True,
        ).stdout.split()
        for cid in ids:
            args = docker_inspect(cid)["Args"] if cid else []
            if "train" in args and "--function_to_execute" in args:
                return cid
        time.sleep(0.5)
    raise AssertionError(f"no train container seen (pipeline exit code {process.poll()})")


def docker_inspect(cid: str) -> dict:
    done = subprocess.run(["docker", "inspect", cid], capture_output=True, text=True)
    return json.loads(done.stdout)[0] if done.returncode == 0 else {"Args": []}


def kill_after_first_checkpoint(cid: str) -> tuple[int, str]:
    """Follow the container's log; SIGKILL it once an epoch's checkpoint is stored."""
    logs = subprocess.Popen(
        ["docker", "logs", "--follow", cid],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen = []
    try:
        for line in logs.stdout:
            seen.append(line)
            stored = STORED.search(line)
            if stored:
                subprocess.run(["docker", "kill", "--signal", "KILL", cid], check=True)
                return int(stored[1]), "".join(seen)
    finally:
        logs.kill()
        logs.wait()
    raise AssertionError("the train task ended before storing a checkpoint:\n" + "".join(seen))


def rerun(spec: dict) -> subprocess.CompletedProcess[str]:
    """`docker run` of the killed container's image, command, user, environment and mounts."""
    host = spec["HostConfig"]
    command = ["docker", "run", "--rm", "--network", host["NetworkMode"]]
    command += ["--user", spec["Config"]["User"]]
    if host.get("ReadonlyRootfs"):
        command.append("--read-only")
    for path, options in (host.get("Tmpfs") or {}).items():
        command += ["--tmpfs", f"{path}:{options}" if options else path]
    for mount in spec["Mounts"]:
        mode = "rw" if mount["RW"] else "ro"
        command += ["-v", f"{mount['Source']}:{mount['Destination']}:{mode}"]
    for pair in spec["Config"]["Env"]:
        command += ["-e", pair]
    command += ["--entrypoint", spec["Path"], spec["Config"]["Image"], *spec["Args"]]
    return subprocess.run(command, capture_output=True, text=True, timeout=FIND_TIMEOUT_S)


def model_output(spec: dict) -> Path:
    executor_input = json.loads(spec["Args"][spec["Args"].index("--executor_input") + 1])
    (artifact,) = executor_input["outputs"]["artifacts"]["model"]["artifacts"]
    return Path(artifact["uri"])


def weights(model: Path) -> dict[str, np.ndarray]:
    with np.load(model / "hasher" / "state.npz") as state:
        return {name: state[name] for name in state.files}


@pytest.fixture(scope="module")
def preempted(runtime_image, mlflow_server, s3_server, tmp_path_factory):  # noqa: F811
    tmp = tmp_path_factory.mktemp("preemption")
    params = deep_merge(smoke_settings({"shdh"}), {"train": {"epochs": EPOCHS}})
    params_file = tmp / "params.yaml"
    params_file.write_text(yaml.safe_dump(params, sort_keys=False))
    env = pipeline_env(mlflow_server, s3_server, "checkpoints-preemption")
    # The uninterrupted run first: the weights the resumed fit must end with.
    whole = run_pipeline(params_file, tmp / "whole", env, "--docker", "--image", runtime_image)
    (whole_model,) = whole["results"].parents[1].glob("for-loop-*/train/model")

    command = [sys.executable, "-m", "shdh.cli", "pipeline", "run", "--local", "--docker"]
    command += ["--image", runtime_image, "--params", str(params_file)]
    command += ["--root", str(tmp / "killed")]
    log_path = tmp / "killed.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen(command, cwd=REPO, env=env, stdout=log, stderr=log)
    try:
        cid = train_container(runtime_image, process)
        spec = docker_inspect(cid)
        stored_epoch, killed_log = kill_after_first_checkpoint(cid)
        assert process.wait(timeout=600) != 0, "the pipeline did not notice the killed task"
    finally:
        if process.poll() is None:
            process.kill()
    retried = rerun(spec)
    return {
        "spec": spec,
        "stored_epoch": stored_epoch,
        "killed_log": killed_log,
        "retried": retried,
        "whole_model": whole_model,
        "pipeline_log": log_path.read_text(),
    }


def test_the_killed_task_failed_the_run(preempted):
    assert "train" in preempted["pipeline_log"] and "FAILURE" in preempted["pipeline_log"]


def test_the_retry_resumes_from_the_stored_checkpoint_losing_at_most_one_epoch(preempted):
    retried = preempted["retried"]
    log = retried.stdout + retried.stderr
    assert retried.returncode == 0, log[-6000:]
    restored = RESTORED.search(log)
    assert restored, log[-6000:]
    # The killed container stored epochs up to stored_epoch and was killed in the next one.
    assert int(restored[1]) >= preempted["stored_epoch"] >= 1
    assert EPOCHS - int(restored[1]) < EPOCHS  # not from scratch
    trained = [int(m[1]) for m in STORED.finditer(log)]
    assert trained and min(trained) == int(restored[1]) + 1 and max(trained) == EPOCHS


def test_the_resumed_fit_ends_with_the_uninterrupted_runs_weights_bit_for_bit(preempted):
    resumed = weights(model_output(preempted["spec"]))
    whole = weights(preempted["whole_model"])
    assert resumed.keys() == whole.keys() and resumed
    for name in whole:
        assert resumed[name].dtype == whole[name].dtype
        assert np.array_equal(resumed[name], whole[name]), name
    history = json.loads((model_output(preempted["spec"]) / "history.json").read_text())
    reference = json.loads((preempted["whole_model"] / "history.json").read_text())
    assert [e["loss"] for e in history] == [e["loss"] for e in reference]
