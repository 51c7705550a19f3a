"""Comparing runs in the MLflow UI, as users do, in a real browser.

A real `mlflow server` on SQLite, two smoke pipeline runs tracked into it (the dvc.yaml commands,
then `train.epochs: 2` with only training and evaluation rerun, as `dvc exp run -S
train.epochs=2` does), and MLflow's own web UI opened in Debian's headless Chromium. The test
asserts what a user sees: the runs table with the pipeline runs, one expanded into a run per
method with its NDCG@100, and the comparison views of two methods and of two pipeline runs. Its
screenshots are the pictures of docs/mlflow.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from shdh.config import deep_merge
from tests.browser.ui import start_browser
from tests.conftest import REPO
from tests.integration.conftest import free_ports
from tests.integration.test_mlflow_server import stop_by_pid, wait_for_health
from tests.pipelines.front_doors import (
    dvc_commands,
    dvc_params_file,
    run_dvc_stages,
    smoke_settings,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]
SCREENSHOTS = REPO / "docs" / "images"
ML_WORKFLOW = "workflowType=machine_learning"


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[str]:
    """`mlflow server` on SQLite with local artifacts, as `mlflow ui` serves a run's store."""
    root = tmp_path_factory.mktemp("mlflow-ui")
    (port,) = free_ports(1)
    url = f"http://127.0.0.1:{port}"
    command = [
        str(Path(sys.executable).parent / "mlflow"), "server",
        "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
        "--artifacts-destination", str(root / "artifacts"),
        "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
    ]  # fmt: skip
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    log_path = root / "server.log"
    with open(log_path, "wb") as log:
        process = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, cwd=root,
                                   start_new_session=True)  # fmt: skip
    try:
        wait_for_health(url, process, log_path)
        yield url
    finally:
        stop_by_pid(process)


def track_two_pipeline_runs(url: str, work: Path) -> dict[str, Any]:
    """The smoke pipeline, then the same with two epochs (training and evaluation only, the
    rest cached as DVC would); returns both params files and the first run's scores."""
    params = smoke_settings()
    first = dvc_params_file(params, work)
    second = work / "params-epochs2.yaml"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", url)
        mp.chdir(REPO)  # data.dvc and the git commit, as a user runs it
        run_dvc_stages(first, params)
        scores = json.loads((work / "results" / "metrics.json").read_text())
        changed = deep_merge(yaml.safe_load(first.read_text()), {"train": {"epochs": 2}})
        second.write_text(yaml.safe_dump(changed, sort_keys=False))
        from shdh.cli import main

        rerun = [c for c in dvc_commands(changed) if c.startswith(("shdh train --method",
                                                                   "shdh evaluate"))]  # fmt: skip
        for command in rerun:
            assert main([*command.split()[1:], "--params", str(second)]) == 0, command
    return {"first": first, "second": second, "scores": scores, "params": params}


@pytest.fixture(scope="module")
def tracked(server, tmp_path_factory) -> dict[str, Any]:
    import mlflow

    start = time.monotonic()
    runs = track_two_pipeline_runs(server, tmp_path_factory.mktemp("smoke"))
    print(f"two smoke pipeline runs tracked in {time.monotonic() - start:.0f} s")
    client = mlflow.MlflowClient(tracking_uri=server)
    experiment = client.get_experiment_by_name("shdh")
    found = client.search_runs([experiment.experiment_id], max_results=200)
    parents = sorted((r for r in found if r.data.tags.get("shdh.role") == "pipeline"),
                     key=lambda r: r.info.start_time)  # fmt: skip
    children = {p.info.run_id: {r.info.run_name: r for r in found
                                if r.data.tags.get("mlflow.parentRunId") == p.info.run_id}
                for p in parents}  # fmt: skip
    return {**runs, "experiment": experiment, "parents": parents, "children": children}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver = start_browser()
    try:
        yield driver
    finally:
        driver.quit()
