"""The pipeline's parent MLflow run: the row a user sees first, and what it tells.

It lasts as long as the pipeline. The first tracked step opens it (DVC: the first train stage;
Kubeflow: the start step), every method run nests under it, and the evaluate step writes the
story onto it and closes it: the results table as its description (the run note the UI
shows), an HTML report with this run's figures, the figures and the result files as artifacts
(the scores themselves are the method runs' metrics). Its params are the
pipeline's settings, flattened (train.epochs, baselines.ksh.n_anchors), so two pipeline runs
compare setting by setting. A step that fails marks it FAILED; reopened by a rerun of the same
pipeline run, it is RUNNING again until evaluate closes it.

The DVC stages are separate processes, so the parent is found again by its pipeline tag in
each of them rather than passed along.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path
from typing import Any

from shdh import comparison_view, mlflow_store
from shdh.tracking import (
    PIPELINE_TAG,
    ROLE_TAG,
    _param_value,
    flatten,
    metric_key,
)

NOTE_TAG = "mlflow.note.content"  # the run's description in the UI
NOTE_LIMIT = 8000  # MLflow's limit on a tag value
EXPERIMENT_NAME_ENV = "DVC_EXP_NAME"  # the name DVC gives a queued or temporary experiment
RESULT_FILES = ("table.md", "metrics.json", "metrics_by_seed.json", "timings.json")

log = logging.getLogger(__name__)


def find_parent(client: Any, experiment_id: str, pipeline_id: str) -> Any | None:
    """The parent run of pipeline run `pipeline_id`, or None. Children carry the pipeline tag
    too (to filter by it in the UI); the role tag tells the parent apart."""
    query = f"tags.`{PIPELINE_TAG}` = '{pipeline_id}' and tags.`{ROLE_TAG}` = 'pipeline'"
    found = client.search_runs([experiment_id], filter_string=query, max_results=1)
    return found[0] if found else None


def _client_and_experiment() -> tuple[Any, str]:
    """An MLflow client and the experiment's id, with the store configured once."""
    experiment_id = mlflow_store.experiment_id()  # configures the store and the experiment
    import mlflow

    return mlflow.MlflowClient(), experiment_id


def open_parent(
    pipeline_id: str, tags: dict[str, str], settings: dict[str, Any] | None, reopen: bool = True
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
        run_name=exp_name or f"pipeline-{pipeline_id[:8]}",
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

    params = [Param(metric_key(k), _param_value(v)) for k, v in sorted(flatten(settings).items())]
    client.log_batch(run_id, params=params)


REPORT_FILE = "report/report.html"


def summarize(parent_run_id: str, results_dir: str | Path, report: str | Path | None = None) -> str:
    """Write the evaluation onto the parent: the results table as its description, the result
    files, this run's figures and an HTML report of them as artifacts; save the UI's view of
    its methods compared and return that view's address.

    The per-method scores stay on the method runs (one name per metric, grouped by the method,
    bits and seed tags): on the parent they would be hundreds of one-bar charts. The figures
    are redrawn from this run's curves.npz, so none comes from a file the run did not make
    (results/plots also holds Fig. 5, drawn from a separate benchmark's sweep). `report`, the
    hand-edited document around the generated tables, links outside the run: it is not logged.
    """
    import tempfile

    from shdh.figures import CURVES_FILE, load_curves, write_figures
    from shdh.report import run_report_html

    client = mlflow_store.configure().MlflowClient()
    results_dir = Path(results_dir)
    table = (results_dir / "table.md").read_text()
    scores = json.loads((results_dir / "metrics.json").read_text())
    view = save_comparison_view(client, parent_run_id, scores)
    client.set_tag(parent_run_id, NOTE_TAG, description(table, view))
    for name in RESULT_FILES:
        if (results_dir / name).is_file():
            client.log_artifact(parent_run_id, str(results_dir / name), "results")
    if not (results_dir / CURVES_FILE).is_file():
        return view
    curves, dataset, n = load_curves(results_dir / CURVES_FILE)
    title = f"Results of {client.get_run(parent_run_id).info.run_name}"
    with tempfile.TemporaryDirectory() as tmp:
        figures = write_figures(curves, Path(tmp) / "figures")
        for figure in figures:
            client.log_artifact(parent_run_id, str(figure.path), "figures")
        page = run_report_html(scores, figures, dataset=dataset, n=n, title=title)
    client.log_text(parent_run_id, page, REPORT_FILE)
    return view


def save_comparison_view(client: Any, parent_run_id: str, scores: dict[str, Any]) -> str:
    """Save the UI's view of this pipeline run's methods compared (shdh.comparison_view) as a
    view of the experiment; returns its address in the UI of this store."""
    parent = client.get_run(parent_run_id)
    pipeline_id = parent.data.tags[PIPELINE_TAG]
    key = comparison_view.view_key(pipeline_id)
    state = comparison_view.view_state(pipeline_id, comparison_view.charted_scores(scores))
    name = f"Methods of {parent.info.run_name}"
    comparison_view.save_view(client, parent.info.experiment_id, key, name, state)
    path = comparison_view.view_path(parent.info.experiment_id, key)
    return f"{comparison_view.ui_url(mlflow_store.tracking_uri())}/{path}"


def description(table: str, view: str) -> str:
    """The parent's note: the results table, the link to the methods compared (its address
    inside the UI, so it holds wherever the UI is served), and where the rest is."""
    link = view[view.index("#") :]
    text = (
        "## Results of this pipeline run\n\n"
        f"[Compare the methods of this run in charts]({link}): grouped by method and code "
        "length, one chart per score.\n\n"
        f"{table.strip()}\n\n"
        "Each method run below this one holds its own metrics, per-epoch training curves, codes "
        f"and model. Artifacts: {REPORT_FILE} (the results with their figures), figures/, "
        "results/.\n"
    )
    if len(text) > NOTE_LIMIT:
        cut = "\n\n(table cut here: results/table.md holds all of it)\n"
        text = text[: NOTE_LIMIT - len(cut)] + cut
    return text


def parent_of_pipeline(pipeline_id: str) -> str:
    """The parent run id of a pipeline run (by its pipeline id), or an error naming it."""
    found = find_parent(*_client_and_experiment(), pipeline_id)
    if found is None:
        raise ValueError(
            f"no MLflow pipeline run {pipeline_id} in experiment "
            f"'{mlflow_store.experiment_name()}' at {mlflow_store.tracking_uri()}: "
            "run the pipeline first, or give the parent run's id"
        )
    return found.info.run_id


def pipeline_context(
    pipeline_id: str,
    tags: dict[str, str],
    settings: dict[str, Any] | None = None,
    reopen: bool = True,
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
    parent = open_parent(pipeline_id, tags, settings, reopen)
    return {"tags": tags, "parent_run_id": parent}
