"""MLflow tracking: the few calls the pipeline makes, run names and tags. Where runs go (the
store, the experiment, concurrent writers) is shdh.tracking.store; the pipeline's parent run is
shdh.tracking.parent_run; the deep encoders as MLflow models are shdh.tracking.encoder_model; the
Model Registry is shdh.tracking.model_registry.

Both front doors (DVC and Kubeflow) put one pipeline run under one parent run, with a nested run
per method, code length and seed, named as the fit is (shdh.plan.fits.fit_name,
METHOD-BITS[-seedS]), and tag every run alike (MLflow's source tags for the commit, the raw-data
hash, the pipeline run id, dataset, profile; method_tags: the method, bits and seed) so that runs
from either can be filtered, grouped and compared in one UI.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import re
import subprocess
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from shdh.runtime import instruction_set
from shdh.runtime.json_files import read_json_object
from shdh.tracking.store import (
    DEFAULT_EXPERIMENT,
    TrackingUnavailableError,
    check_server,
    configure,
    experiment_name,
    tracking_uri,
)

__all__ = [
    "DEFAULT_EXPERIMENT",
    "TrackingUnavailableError",
    "check_server",
    "experiment_name",
    "tracking_uri",
]

log = logging.getLogger(__name__)
PARENT_TAG = "mlflow.parentRunId"
# MLflow's own tags: the UI's Source and Version columns read them.
COMMIT_TAG = "mlflow.source.git.commit"
SOURCE_NAME_TAG = "mlflow.source.name"
SOURCE_TYPE_TAG = "mlflow.source.type"
# Which code path the CPU maths took (docs/reproducibility.md): runs compare bit for bit only
# within one pin mode.
CPU_PIN_TAG = "shdh.cpu_pin"  # the tag key runs have carried since the pin began; not a module path
CPU_ISA_TAG = "shdh.cpu_isa"
_NOT_A_KEY_CHAR = re.compile(r"[^/\w.\- :]")


def metric_key(name: str) -> str:
    """A metric, param or tag key MLflow accepts: '@' becomes '_at_' (acg@100 -> acg_at_100)
    and any other refused character '_' (ksh+h -> ksh_h)."""
    return _NOT_A_KEY_CHAR.sub("_", name.replace("@", "_at_"))


# A score logged again with the code length as its step, which a line chart takes as its x
# axis: the MLflow UI's view draws each method as a line through its code lengths
# (shdh.reporting.ui_view).
BY_BITS_SUFFIX = "_by_bits"


def by_bits_key(name: str) -> str:
    """The MLflow name of a score's twin against the code length: ndcg@100 and ndcg_at_100 ->
    ndcg_at_100_by_bits."""
    return metric_key(name) + BY_BITS_SUFFIX


def by_bits(metrics: dict[str, float], names: Iterable[str]) -> dict[str, float]:
    """The twins of those of `names` that `metrics` holds, to be logged at step = bits."""
    return {by_bits_key(name): metrics[name] for name in names if name in metrics}


GIT_COMMIT_ENV = "SHDH_GIT_COMMIT"


def git_commit() -> str:
    """The commit the code ran from, so a run can be traced to its source; 'unknown' outside git.

    A container has no .git: the image records its commit in SHDH_GIT_COMMIT at build time.
    """
    if os.environ.get(GIT_COMMIT_ENV):
        return os.environ[GIT_COMMIT_ENV]
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5, check=True
        )
        return out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def source_tags(name: str = "shdh", kind: str = "LOCAL") -> dict[str, str]:
    """MLflow's source tags: the commit, what ran (dvc.yaml, the Kubeflow pipeline, the shdh
    command) and how (LOCAL, or JOB on a cluster); with them the CPU pin the run's maths ran
    under and the host's instruction set (shdh.runtime.instruction_set.describe)."""
    pin = instruction_set.describe()
    return {
        COMMIT_TAG: git_commit(),
        SOURCE_NAME_TAG: name,
        SOURCE_TYPE_TAG: kind,
        CPU_PIN_TAG: pin["cpu_pin"],
        CPU_ISA_TAG: pin["cpu_isa"],
    }


@contextmanager
def run(
    *,
    run_name: str,
    params: dict[str, Any] | None = None,
    tags: dict[str, str] | None = None,
    run_id: str | None = None,
    parent_run_id: str | None = None,
    experiment: str | None = None,
) -> Iterator[Any]:
    """Start (or, with run_id, reopen) a run; yields the active mlflow.ActiveRun.

    Reopening lets the evaluate step add its metrics and artifacts to the run that trained the
    model, so one run holds the whole story of one model. A new run with parent_run_id is
    nested under that pipeline run in the UI, and an error inside marks that pipeline run
    FAILED. A new run gets the source tags, which `tags` may override (the front doors name
    themselves).
    """
    mlflow = configure(experiment)
    kwargs: dict[str, Any] = {"run_id": run_id} if run_id else {"run_name": run_name}
    if parent_run_id and not run_id:
        kwargs.update(parent_run_id=parent_run_id, nested=True)
    with mlflow.start_run(**kwargs) as active:
        merged = {**({} if run_id else source_tags()), **(tags or {})}
        if merged:
            mlflow.set_tags(merged)
        if params:
            mlflow.log_params({metric_key(k): param_value(v) for k, v in params.items()})
        parent = active.data.tags.get(PARENT_TAG) or parent_run_id
        if parent is None:
            yield active
            return
        with failure_ends(parent):  # a method run that fails fails its pipeline run
            yield active


def param_value(value: Any) -> str:
    text = json.dumps(value) if isinstance(value, (list, dict)) else str(value)
    return text[:6000]  # MLflow's limit on a param value


def log_metrics(metrics: dict[str, float], step: int | None = None) -> None:
    import mlflow

    mlflow.log_metrics({metric_key(k): float(v) for k, v in metrics.items()}, step=step)


def set_tags(tags: dict[str, str]) -> None:
    import mlflow

    mlflow.set_tags(tags)


def log_artifact(path: str | Path, artifact_path: str | None = None) -> None:
    import mlflow

    mlflow.log_artifact(str(path), artifact_path=artifact_path)


def log_to_run(
    run_id: str,
    metrics: dict[str, float],
    artifacts: list[tuple[Path, str | None]] = (),
    *,
    stepped: dict[str, float] | None = None,
    step: int = 0,
) -> None:
    """Add metrics (at step 0; `stepped` at `step`) and artifacts to a finished run without
    reopening it.

    Reopening a run (start_run(run_id=...)) moves its end time to now: a fit scored minutes
    later would show the whole wait as its duration. Through the client the run keeps the
    start and end of its fit.
    """
    import time

    from mlflow.entities import Metric

    client = configure().MlflowClient()
    now = int(time.time() * 1000)
    batch = [Metric(metric_key(k), float(v), now, 0) for k, v in sorted(metrics.items())]
    batch += [
        Metric(metric_key(k), float(v), now, step) for k, v in sorted((stepped or {}).items())
    ]
    client.log_batch(run_id, metrics=batch)
    for path, artifact_path in artifacts:
        client.log_artifact(run_id, str(path), artifact_path)


def method_tags(method: str, bits: int, seed: int) -> dict[str, str]:
    """The tags of a method run: the chart view groups runs by them (method and bits, the
    seeds of one group drawn as their mean and spread), and the runs table filters by them."""
    return {"method": method, "bits": str(bits), "seed": str(seed)}


def save_run_ref(path: str | Path, active: Any) -> None:
    """Record which MLflow run a model belongs to (and under which pipeline run), next to it."""
    from shdh.runtime.atomic import atomic_write_text

    info = active.info
    ref = {
        "run_id": info.run_id,
        "experiment_id": info.experiment_id,
        "parent_run_id": active.data.tags.get(PARENT_TAG),
        "tracking_uri": tracking_uri(),
    }
    atomic_write_text(path, json.dumps(ref, indent=2) + "\n")


def fitted_hasher(model_dir: str | Path) -> tuple[Path, str | None]:
    """The hasher folder of a fit's model folder (models_root/METHOD/NAME), or of its hasher/
    folder given itself, and the MLflow run that trained it where the fit recorded one (its
    mlflow_run.json beside hasher/): `shdh index` and `shdh serve` take either folder, and the
    run is what ties an encoder to the index its codes were ranked in."""
    from shdh.plan.fits import HASHER_DIR, RUN_REF

    model_dir = Path(model_dir)
    if not model_dir.is_dir():
        raise ValueError(f"--model-dir {model_dir}: no such folder")
    if (model_dir / HASHER_DIR).is_dir():
        hasher_dir, fit_dir = model_dir / HASHER_DIR, model_dir
    else:
        hasher_dir = model_dir
        fit_dir = model_dir.parent if model_dir.name == HASHER_DIR else None
    ref = None if fit_dir is None else fit_dir / RUN_REF
    if ref is None or not ref.is_file():
        return hasher_dir, None
    return hasher_dir, read_json_object(ref, "the MLflow run reference").get("run_id")


def load_run_ref(path: str | Path, parent_run_id: str | None = None) -> str | None:
    """The run id saved by save_run_ref, or None when the model was trained untracked, in
    another store, or (given parent_run_id) under another pipeline run: a model that a later
    pipeline run reuses, or retrains from its checkpoint, gets a run of its own under that
    pipeline's parent, so each parent holds every method of its pipeline run."""
    path = Path(path)
    if not path.is_file():
        return None
    ref = read_json_object(path, "the MLflow run reference")
    if ref.get("tracking_uri") != tracking_uri():
        log.warning(
            "%s was tracked at %s; starting a new run at %s",
            path,
            ref.get("tracking_uri"),
            tracking_uri(),
        )
        return None
    if parent_run_id is not None and ref.get("parent_run_id") != parent_run_id:
        log.info(
            "%s belongs to pipeline run %s; starting a run under %s",
            path,
            ref.get("parent_run_id"),
            parent_run_id,
        )
        return None
    return ref.get("run_id")


PIPELINE_TAG = "shdh.pipeline_run_id"
PIPELINE_ID_ENV = "SHDH_PIPELINE_RUN_ID"  # a pipeline run's id given explicitly
ROLE_TAG = "shdh.role"
# The logged encoder's model URI, on the run that trained it (shdh.tracking.encoder_model sets it),
# so the best model of a pipeline run can be found and registered (shdh.tracking.model_registry).
MODEL_URI_TAG = "shdh.model_uri"


def pipeline_run_id(params_text: str, data_hash: str = "") -> str:
    """The id of one pipeline run: SHDH_PIPELINE_RUN_ID (Kubeflow sets it) or, for DVC, a hash
    of the settings and the data, so that every stage of one `dvc repro` or `dvc exp run` lands
    under the same parent run and a run with other settings gets its own."""
    import hashlib

    explicit = os.environ.get(PIPELINE_ID_ENV)
    if explicit:
        return explicit
    return hashlib.sha1(f"{params_text}\n{data_hash}".encode()).hexdigest()[:16]


def dvc_dir_md5(folder: str | Path) -> str:
    """The hash DVC gives a tracked folder (`md5: ....dir` in data.dvc), computed without DVC.

    DVC hashes the JSON list of {md5, relpath} of every file, sorted by path. A Kubeflow
    component fetches the raw files itself rather than through data.dvc; hashing them the same
    way gives its runs the same `dvc_data_md5` tag as `dvc repro` on the same data.
    """
    import hashlib

    from shdh.data.download import md5sum

    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"{folder}: not a folder; cannot hash the raw data")
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    entries = [{"md5": md5sum(p), "relpath": p.relative_to(folder).as_posix()} for p in files]
    entries.sort(key=lambda e: e["relpath"])
    listing = json.dumps(entries, sort_keys=True).encode("utf-8")
    return hashlib.md5(listing).hexdigest() + ".dir"


def attach_text(run_id: str, text: str, artifact_file: str) -> None:
    """Add a text artifact to a finished run (the pipeline's parent) without reopening it."""
    mlflow = configure()
    mlflow.MlflowClient().log_text(run_id, text, artifact_file)


def flatten(mapping: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """{'train': {'epochs': 3}} -> {'train.epochs': 3}: the form DVC and MLflow use for params."""
    flat: dict[str, Any] = {}
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if dataclasses.is_dataclass(value):  # a settings object, e.g. a deep method's loop
            value = dataclasses.asdict(value)
        if isinstance(value, dict):
            flat.update(flatten(value, f"{name}."))
        else:
            flat[name] = value
    return flat


def end_parent(parent_run_id: str, status: str = "FINISHED") -> None:
    """Close the parent run with `status` (FINISHED, FAILED or KILLED)."""
    configure().MlflowClient().set_terminated(parent_run_id, status)


@contextlib.contextmanager
def failure_ends(parent_run_id: str) -> Iterator[None]:
    """Mark the parent FAILED (KILLED on Ctrl-C) if the step inside fails, and re-raise."""
    try:
        yield
    except Exception:
        _end_quietly(parent_run_id, "FAILED")
        raise
    except BaseException:
        _end_quietly(parent_run_id, "KILLED")
        raise


def _end_quietly(parent_run_id: str, status: str) -> None:
    try:
        end_parent(parent_run_id, status)
    except Exception as exc:  # the step's own error is the one to report
        log.warning("could not mark MLflow run %s %s: %s", parent_run_id, status, exc)
