"""MLflow tracking: where runs go, and the few calls the pipeline makes.

The tracking URI comes from MLFLOW_TRACKING_URI when set (a team server), else a SQLite file in
the working directory: MLflow 3.17 refuses the plain ./mlruns file store. A remote server is
probed once with a short timeout, because MLflow's own client retries for minutes before it
gives up, and a pipeline that hangs on a typo in a URL wastes a training slot.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

DEFAULT_TRACKING_URI = "sqlite:///mlflow.db"
DEFAULT_EXPERIMENT = "shdh"
PROBE_TIMEOUT_S = 10

log = logging.getLogger(__name__)


class TrackingUnavailableError(RuntimeError):
    """The tracking server does not answer; raised instead of hanging in MLflow's retries."""


def tracking_uri() -> str:
    return os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


def metric_key(name: str) -> str:
    """MLflow refuses '@' in metric names: acg@100 is logged as acg_at_100."""
    return name.replace("@", "_at_")


def check_server(uri: str, timeout: float = PROBE_TIMEOUT_S) -> None:
    """Fail fast, naming the URI, when an http(s) tracking server cannot be reached."""
    if not uri.startswith(("http://", "https://")):
        return
    url = uri.rstrip("/") + "/health"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:  # noqa: S310 (user URI)
            if response.status >= 500:
                raise TrackingUnavailableError(
                    f"MLflow tracking server {uri} answered HTTP {response.status}"
                )
    except (urllib.error.URLError, OSError, TimeoutError) as exc:
        raise TrackingUnavailableError(
            f"MLflow tracking server {uri} is unreachable ({exc}); set MLFLOW_TRACKING_URI to a "
            f"running server or unset it to track into {DEFAULT_TRACKING_URI}"
        ) from exc


def _configure(experiment: str) -> Any:
    uri = tracking_uri()
    check_server(uri)  # before importing mlflow, which alone takes seconds
    import mlflow  # lazy: importing shdh must stay cheap and side-effect free

    # Bound MLflow's own HTTP retries too, so a server that dies mid-run also fails quickly.
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "2")
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment(experiment)
    return mlflow


def git_commit() -> str:
    """The commit the code ran from, so a run can be traced to its source; 'unknown' outside git."""
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=True
        )
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


@contextmanager
def run(
    *,
    run_name: str,
    params: dict[str, Any] | None = None,
    tags: dict[str, str] | None = None,
    run_id: str | None = None,
    parent_run_id: str | None = None,
    experiment: str = DEFAULT_EXPERIMENT,
) -> Iterator[Any]:
    """Start (or, with run_id, reopen) a run; yields the active mlflow.ActiveRun.

    Reopening lets the evaluate step add its metrics and artifacts to the run that trained the
    model, so one run holds the whole story of one model. A new run with parent_run_id is
    nested under that pipeline run in the UI.
    """
    mlflow = _configure(experiment)
    kwargs: dict[str, Any] = {"run_id": run_id} if run_id else {"run_name": run_name}
    if parent_run_id and not run_id:
        kwargs.update(parent_run_id=parent_run_id, nested=True)
    with mlflow.start_run(**kwargs) as active:
        if tags:
            mlflow.set_tags(tags)
        if params:
            mlflow.log_params({k: _param_value(v) for k, v in params.items()})
        yield active


def _param_value(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (list, dict)) else str(value)
    return text[:6000]  # MLflow's limit on a param value


def log_metrics(metrics: dict[str, float], step: int | None = None) -> None:
    import mlflow

    mlflow.log_metrics({metric_key(k): float(v) for k, v in metrics.items()}, step=step)


def log_artifact(path: str | Path, artifact_path: str | None = None) -> None:
    import mlflow

    mlflow.log_artifact(str(path), artifact_path=artifact_path)


def save_run_ref(path: str | Path, active: Any) -> None:
    """Record which MLflow run a model belongs to, next to the model."""
    from shdh.atomic import atomic_write_text

    info = active.info
    ref = {
        "run_id": info.run_id,
        "experiment_id": info.experiment_id,
        "tracking_uri": tracking_uri(),
    }
    atomic_write_text(path, json.dumps(ref, indent=2) + "\n")


def load_run_ref(path: str | Path) -> str | None:
    """The run id saved by save_run_ref, or None when the model was trained untracked."""
    path = Path(path)
    if not path.is_file():
        return None
    ref = json.loads(path.read_text())
    if ref.get("tracking_uri") != tracking_uri():
        log.warning(
            "%s was tracked at %s; starting a new run at %s",
            path,
            ref.get("tracking_uri"),
            tracking_uri(),
        )
        return None
    return ref.get("run_id")


PIPELINE_TAG = "shdh.pipeline_run_id"
ROLE_TAG = "shdh.role"


def pipeline_run_id(params_text: str, data_hash: str = "") -> str:
    """The id of one pipeline run: SHDH_PIPELINE_RUN_ID (Kubeflow sets it) or, for DVC, a hash
    of the settings and the data, so that every stage of one `dvc repro` or `dvc exp run` lands
    under the same parent run and a run with other settings gets its own."""
    import hashlib

    explicit = os.environ.get("SHDH_PIPELINE_RUN_ID")
    if explicit:
        return explicit
    return hashlib.sha1(f"{params_text}\n{data_hash}".encode()).hexdigest()[:16]


def parent_run(pipeline_id: str, tags: dict[str, str], experiment: str = DEFAULT_EXPERIMENT) -> str:
    """The run id of the pipeline's parent run, created on first use (find-or-create by tag)."""
    mlflow = _configure(experiment)
    client = mlflow.MlflowClient()
    exp = client.get_experiment_by_name(experiment)
    # Children carry the pipeline tag too (to filter by it in the UI); the role tells them apart.
    query = f"tags.`{PIPELINE_TAG}` = '{pipeline_id}' and tags.`{ROLE_TAG}` = 'pipeline'"
    found = client.search_runs([exp.experiment_id], filter_string=query, max_results=1)
    if found:
        return found[0].info.run_id
    run = client.create_run(
        exp.experiment_id, run_name=f"pipeline-{pipeline_id[:8]}",
        tags={**tags, PIPELINE_TAG: pipeline_id, ROLE_TAG: "pipeline", "git_commit": git_commit()},
    )  # fmt: skip
    client.set_terminated(run.info.run_id)
    return run.info.run_id
