"""Preemption for real: the train container killed mid-training, the task run again.

The DAG of one deep method runs through `shdh pipeline run --local --docker`, its train task in
the runtime image with its checkpoints going to a real S3 server (SHDH_CHECKPOINT_URL). Once
the first epoch's checkpoint is in the store, the container is killed (SIGKILL, as a node that
goes away) in the middle of the second epoch; the run fails. The task is then run again as a
retry runs it: the same image, command, inputs and pipeline run id (taken from the killed
container with `docker inspect`). It must restore the stored checkpoint, so at most the epoch
in progress is lost, and end with the weights of the uninterrupted run of the same settings
(the container run of test_pipeline_in_containers), bit for bit (CPU).
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

from tests.conftest import REPO
from tests.containers.conftest import EPOCHS, container_params, pipeline_env

pytestmark = [pytest.mark.integration, pytest.mark.slow]
STORED = re.compile(r"epoch (\d+)'s checkpoint is in (s3://\S+)")
RESTORED = re.compile(r"restored the checkpoint of epoch (\d+) from")
TIMEOUT_S = 900


def docker_inspect(cid: str) -> dict:
    done = subprocess.run(["docker", "inspect", cid], capture_output=True, text=True)
    return json.loads(done.stdout)[0] if done.returncode == 0 else {"Args": []}


def train_container(image: str, process: subprocess.Popen) -> str:
    """The id of the train task's container, once kfp.local has started it."""
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        listed = subprocess.run(
            ["docker", "ps", "-q", "--filter", f"ancestor={image}"],
            capture_output=True,
            text=True,
        )
        for cid in listed.stdout.split():
            args = docker_inspect(cid)["Args"]
            if "--function_to_execute" in args and "train" in args:
                return cid
        time.sleep(0.5)
    raise AssertionError(f"no train container seen (pipeline exit code {process.poll()})")


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
    return subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_S)


def model_output(spec: dict) -> Path:
    executor_input = json.loads(spec["Args"][spec["Args"].index("--executor_input") + 1])
    (artifact,) = executor_input["outputs"]["artifacts"]["model"]["artifacts"]
    return Path(artifact["uri"])


def trained_model(results: Path, method: str) -> Path:
    """The Model output of `method`'s train task in the run whose results folder is given."""
    for fit in results.parents[1].glob("train*/model/fit.json"):  # train, train-2: one per fit
        if json.loads(fit.read_text())["method"] == method:
            return fit.parent
    raise AssertionError(f"no {method} model under {results.parents[1]}")


def weights(model: Path) -> dict[str, np.ndarray]:
    with np.load(model / "hasher" / "state.npz") as state:
        return {name: state[name] for name in state.files}


@pytest.fixture(scope="module")
def preempted(runs, runtime_image, mlflow_server, s3_server, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("preemption")
    params_file = tmp / "params.yaml"
    params_file.write_text(yaml.safe_dump(container_params({"shdh"}), sort_keys=False))
    env = pipeline_env(mlflow_server, s3_server, "checkpoints-preemption", "shdh-preemption")
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
        code = process.wait(timeout=TIMEOUT_S)
    finally:
        if process.poll() is None:
            process.kill()
    start = time.monotonic()
    retried = rerun(spec)
    print(f"the retried train task took {time.monotonic() - start:.0f} s")
    return {
        "spec": spec,
        "stored_epoch": stored_epoch,
        "killed_log": killed_log,
        "pipeline_code": code,
        "pipeline_log": log_path.read_text(),
        "retried": retried,
        "whole_model": trained_model(runs["docker"]["results"], "shdh"),
    }


def test_the_killed_task_failed_the_run(preempted):
    assert preempted["pipeline_code"] != 0
    assert "FAILURE" in preempted["pipeline_log"], preempted["pipeline_log"][-3000:]


def test_the_retry_resumes_from_the_stored_checkpoint_losing_at_most_one_epoch(preempted):
    retried = preempted["retried"]
    log = retried.stdout + retried.stderr
    assert retried.returncode == 0, log[-6000:]
    restored = RESTORED.search(log)
    assert restored, log[-6000:]
    # The killed container stored epoch stored_epoch and was killed in the next one: the retry
    # starts from there, so it loses at most the epoch that was in progress.
    assert int(restored[1]) == preempted["stored_epoch"] >= 1
    trained = sorted(int(m[1]) for m in STORED.finditer(log))
    assert trained == list(range(int(restored[1]) + 1, EPOCHS + 1)), log[-6000:]


def test_the_resumed_fit_ends_with_the_uninterrupted_runs_weights_bit_for_bit(preempted):
    resumed_model = model_output(preempted["spec"])
    resumed, whole = weights(resumed_model), weights(preempted["whole_model"])
    assert resumed.keys() == whole.keys() and resumed
    for name in whole:
        assert resumed[name].dtype == whole[name].dtype
        assert np.array_equal(resumed[name], whole[name]), name
    history = json.loads((resumed_model / "history.json").read_text())
    reference = json.loads((preempted["whole_model"] / "history.json").read_text())
    assert [e["loss"] for e in history] == [e["loss"] for e in reference]
