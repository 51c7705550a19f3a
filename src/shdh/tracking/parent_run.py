"""The pipeline's parent MLflow run: the row a user sees first, and what it tells.

It lasts as long as the pipeline. The first tracked step opens it (DVC: the first train stage;
Kubeflow: the start step), every method run nests under it, and the evaluate step writes the
story onto it (shdh.reporting.parent_summary) and closes it. Its params are the pipeline's settings,
flattened (train.epochs, baselines.ksh.n_anchors), so two pipeline runs compare setting by
setting. A step that fails marks it FAILED; reopened by a rerun of the same pipeline run, it is
RUNNING again until evaluate closes it.

Only finding and opening the run lives here: every tracked stage imports this module, so it
loads no report, figure or metric code, and editing those reruns no stage before evaluate.

The DVC stages are separate processes, so the parent is found again by its pipeline tag in
each of them rather than passed along. A step run by hand, outside DVC and Kubeflow, has a
parent of its own (hand_run_context): never a pipeline's, which only that pipeline opens.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from typing import Any

from shdh.tracking import store
from shdh.tracking.mlflow_runs import PIPELINE_TAG, ROLE_TAG, flatten, metric_key, param_value

EXPERIMENT_NAME_ENV = "DVC_EXP_NAME"  # the name DVC gives a queued or temporary experiment
HAND_TAG = "shdh.by_hand"  # on a hand-run step's own parent run
HAND_PREFIX = "hand-"  # of its pipeline id

log = logging.getLogger(__name__)


def find_parent(client: Any, experiment_id: str, pipeline_id: str) -> Any | None:
    """The parent run of pipeline run `pipeline_id`, or None. Children carry the pipeline tag
    too (to filter by it in the UI); the role tag tells the parent apart."""
    query = f"tags.`{PIPELINE_TAG}` = '{pipeline_id}' and tags.`{ROLE_TAG}` = 'pipeline'"
    found = client.search_runs([experiment_id], filter_string=query, max_results=1)
    return found[0] if found else None


def _client_and_experiment() -> tuple[Any, str]:
    """An MLflow client and the experiment's id, with the store configured once."""
    experiment_id = store.experiment_id()  # configures the store and the experiment
    import mlflow

    return mlflow.MlflowClient(), experiment_id


def open_parent(
    pipeline_id: str,
    tags: dict[str, str],
    settings: dict[str, Any] | None,
    reopen: bool = True,
    run_name: str | None = None,
) -> str:
    """The run id of the pipeline's parent run: created on first use, with the settings as
    params, RUNNING; with `reopen`, an existing one is set RUNNING again (a rerun after a failed
    step). Kubeflow's training tasks run side by side, so only its start step reopens: a task
    that starts after a sibling failed must not undo the FAILED."""
    client, experiment_id = _client_and_experiment()
    found = find_parent(client, experiment_id, pipeline_id)
    if found is not None:
        if reopen and found.info.status != "RUNNING":
            client.update_run(found.info.run_id, status="RUNNING")
        return found.info.run_id
    exp_name = os.environ.get(EXPERIMENT_NAME_ENV)
    run = client.create_run(
        experiment_id,
        run_name=run_name or exp_name or f"pipeline-{pipeline_id[:8]}",
        tags={
            **tags,
            PIPELINE_TAG: pipeline_id,
            ROLE_TAG: "pipeline",
            **({"dvc.exp_name": exp_name} if exp_name else {}),
        },
    )
    if settings:
        log_settings(client, run.info.run_id, settings)
    return run.info.run_id


def log_settings(client: Any, run_id: str, settings: dict[str, Any]) -> None:
    """The settings as params, flattened to section.key (MLflow refuses '+': ksh+h -> ksh_h)."""
    from mlflow.entities import Param

    params = [Param(metric_key(k), param_value(v)) for k, v in sorted(flatten(settings).items())]
    client.log_batch(run_id, params=params)


def parent_of_pipeline(pipeline_id: str) -> str:
    """The parent run id of a pipeline run (by its pipeline id), or an error naming it."""
    found = find_parent(*_client_and_experiment(), pipeline_id)
    if found is None:
        raise ValueError(
            f"no MLflow pipeline run {pipeline_id} in experiment "
            f"'{store.experiment_name()}' at {store.tracking_uri()}: "
            "run the pipeline first, or give the parent run's id"
        )
    return found.info.run_id


def pipeline_context(
    pipeline_id: str,
    tags: dict[str, str],
    settings: dict[str, Any] | None = None,
    reopen: bool = True,
    run_name: str | None = None,
) -> dict[str, Any]:
    """The tags and parent run id that every tracked step of one pipeline run passes on; the
    parent run is opened (created with `settings` as its params, or with `reopen` set RUNNING
    again after a failed step: open_parent).

    Both front doors call this: DVC stages with an id hashed from params and data, Kubeflow
    components with the Kubeflow run id. The returned dict is the `tags` / `parent_run_id`
    keyword arguments of the fit steps (shdh.steps.fit_deep.fit, fit_shallow.fit) and
    shdh.steps.score.score.
    """
    tags = {**tags, PIPELINE_TAG: pipeline_id}
    parent = open_parent(pipeline_id, tags, settings, reopen, run_name)
    return {"tags": tags, "parent_run_id": parent}


def hand_run_context(tags: dict[str, str], settings: dict[str, Any] | None) -> dict[str, Any]:
    """pipeline_context for a step run by hand: a parent of its own under a new id, named
    `by-hand-...` in the UI and tagged so, whatever pipeline run shares its settings."""
    pipeline_id = f"{HAND_PREFIX}{uuid.uuid4().hex[:16]}"
    name = f"by-hand-{time.strftime('%Y%m%d-%H%M%S')}"
    return pipeline_context(pipeline_id, {**tags, HAND_TAG: "true"}, settings, run_name=name)


def is_hand_run(context: dict[str, Any]) -> bool:
    """Whether a context of pipeline_context is a hand run's (hand_run_context)."""
    return context["tags"].get(HAND_TAG) == "true"
