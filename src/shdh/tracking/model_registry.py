"""The Model Registry: the best encoder of a pipeline run, registered under a name and an alias,
and loaded back by that alias (models:/NAME@ALIAS), which is how a service picks it up.

"Best" is the highest value of a named metric among the pipeline run's method runs that logged
an encoder (the deep methods; the shallow baselines have no image model). Ties go to the run
name in sorted order, so the choice is reproducible. The `shdh register` command and the
Kubeflow register step both call register_best.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from shdh.tracking.mlflow_runs import MODEL_URI_TAG, PARENT_TAG, metric_key
from shdh.tracking.store import configure

DEFAULT_MODEL_NAME = "shdh-encoder"
DEFAULT_METRIC = "ndcg_at_100"
DEFAULT_ALIAS = "champion"

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Registered:
    """What register_best did: which run won, and the version the alias now points to."""

    name: str
    version: str
    alias: str
    run_id: str
    run_name: str
    metric: str
    value: float

    @property
    def uri(self) -> str:
        return f"models:/{self.name}@{self.alias}"


def _pipeline_run(client: Any, run_id: str) -> Any:
    """The pipeline's parent run, or a ValueError naming the id and the store it is not in
    (MLflow's own error is a traceback's last line)."""
    from mlflow.exceptions import MlflowException

    try:
        return client.get_run(run_id)
    except MlflowException as err:
        raise ValueError(
            f"MLflow run {run_id}: no such run at {client.tracking_uri} ({err.error_code}); "
            "give --run-id a pipeline run's id from this store"
        ) from err


def best_run(parent_run_id: str, metric: str = DEFAULT_METRIC) -> Any:
    """The method run under `parent_run_id` with a logged encoder and the highest `metric`."""
    client = configure().MlflowClient()
    metric = metric_key(metric)  # ndcg@100 is logged as ndcg_at_100
    parent = _pipeline_run(client, parent_run_id)
    children = client.search_runs(
        [parent.info.experiment_id],
        max_results=1000,
        filter_string=f"tags.{PARENT_TAG} = '{parent_run_id}'",
    )
    with_model = [r for r in children if MODEL_URI_TAG in r.data.tags]
    candidates = [r for r in with_model if metric in r.data.metrics]
    if not candidates:
        known = sorted({k for r in with_model for k in r.data.metrics})
        raise ValueError(
            f"MLflow run {parent_run_id}: no method run has both a logged encoder and the metric "
            f"'{metric}' (runs with an encoder: {len(with_model)}; their metrics: "
            f"{', '.join(known) or 'none'}; run the evaluate step first)"
        )
    return min(candidates, key=lambda r: (-r.data.metrics[metric], r.info.run_name or ""))


def register_best(
    parent_run_id: str,
    name: str = DEFAULT_MODEL_NAME,
    *,
    metric: str = DEFAULT_METRIC,
    alias: str = DEFAULT_ALIAS,
) -> Registered:
    """Register the best encoder of a pipeline run as a version of model `name` and point
    `alias` at it (an alias moves: the previous holder loses it). An encoder already registered
    there (the same run, chosen again by another metric) keeps its version and gains the alias:
    one version per trained encoder, however many aliases point at it."""
    import mlflow

    best = best_run(parent_run_id, metric)
    key = metric_key(metric)
    value = float(best.data.metrics[key])
    tags = {"shdh.selected_by": key, f"shdh.{key}": f"{value:.6f}"}
    client = mlflow.MlflowClient()
    known = client.search_model_versions(f"name='{name}' and run_id='{best.info.run_id}'")
    if known:
        version = min(known, key=lambda v: int(v.version))
        for tag, text in tags.items():
            client.set_model_version_tag(name, version.version, tag, text)
    else:
        version = mlflow.register_model(
            best.data.tags[MODEL_URI_TAG],
            name,
            tags={**tags, "shdh.parent_run_id": parent_run_id},
        )
    parent = client.get_run(parent_run_id)
    text = version_description(best, parent, key, value)
    client.update_model_version(name, version.version, description=text)
    client.set_registered_model_alias(name, alias, version.version)
    log.info(
        "registered %s (run %s, %s=%.4f) as %s version %s, alias @%s",
        best.info.run_name,
        best.info.run_id,
        key,
        value,
        name,
        version.version,
        alias,
    )
    return Registered(
        name=name,
        version=str(version.version),
        alias=alias,
        run_id=best.info.run_id,
        run_name=best.info.run_name or "",
        metric=key,
        value=value,
    )


def version_description(best: Any, parent: Any, metric: str, value: float) -> str:
    """What the registry page says of a version: why it won (the metric and its value) and
    which pipeline run it won in, so it can be judged without opening the runs. The metric
    leads: the model's page shows only the first few words of each version's description."""
    return (
        f"{metric} = {value:.4f}: {best.info.run_name} (run {best.info.run_id}), the best deep "
        f"encoder of pipeline run {parent.info.run_name} ({parent.info.run_id}) by {metric}."
    )


def load_by_alias(
    name: str = DEFAULT_MODEL_NAME, alias: str = DEFAULT_ALIAS, *, check_environment: bool = True
) -> Any:
    """The encoder that `alias` of model `name` points to, as an MLflow pyfunc model.

    check_environment=False leaves out MLflow's comparison of the model's pinned requirements
    with this environment (a warning, at most): the pipeline's own steps load what the same
    environment logged, and the comparison reads every installed distribution's file list,
    more than a second per process here. A service, which may run elsewhere, keeps it."""
    import mlflow

    configure()
    return mlflow.pyfunc.load_model(
        f"models:/{name}@{alias}", suppress_warnings=not check_environment
    )


def check_loaded(model: Any) -> tuple[int, int]:
    """Encode the model's own input example (saved with it) and return the codes' shape, so a
    load that only half works (missing code, wrong signature) fails here, not in a service."""
    import numpy as np

    example = model.input_example
    if example is None:
        raise ValueError(f"{model.metadata.model_uri}: the model has no input example to check")
    codes = np.asarray(model.predict(np.asarray(example, dtype=np.uint8)))
    if codes.ndim != 2 or codes.dtype != np.uint8 or len(codes) != len(example):
        raise ValueError(
            f"{model.metadata.model_uri}: encoded {len(example)} images to "
            f"{codes.dtype} codes of shape {codes.shape}"
        )
    return int(codes.shape[0]), int(codes.shape[1])
