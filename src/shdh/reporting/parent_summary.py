"""What the evaluate step writes onto the pipeline's parent run before closing it: the results
table as its description (the run note the UI shows), an HTML report with this run's figures,
the figures and the result files as artifacts (the scores themselves are the method runs'
metrics), and the UI's saved view of the run's methods compared.

Apart from shdh.tracking.parent_run, which every tracked stage loads, because this is the reporting
side: only the steps that end a pipeline run import it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shdh.reporting import ui_view
from shdh.tracking import store
from shdh.tracking.mlflow_runs import PIPELINE_TAG

NOTE_TAG = "mlflow.note.content"  # the run's description in the UI
NOTE_LIMIT = 8000  # MLflow's limit on a tag value
RESULT_FILES = ("table.md", "metrics.json", "metrics_by_seed.json", "timings.json")

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

    from shdh.reporting.figures import CURVES_FILE, load_curves, write_figures
    from shdh.reporting.report import TABLE_FILE, read_metrics, run_report_html

    client = store.configure().MlflowClient()
    results_dir = Path(results_dir)
    table = (results_dir / TABLE_FILE).read_text()
    scores = read_metrics(results_dir)
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
    """Save the UI's view of this pipeline run's methods compared (shdh.reporting.ui_view) as a
    view of the experiment; returns its address in the UI of this store."""
    parent = client.get_run(parent_run_id)
    pipeline_id = parent.data.tags[PIPELINE_TAG]
    key = ui_view.view_key(pipeline_id)
    state = ui_view.view_state(pipeline_id, ui_view.charted_scores(scores))
    name = f"Methods of {parent.info.run_name}"
    ui_view.save_view(client, parent.info.experiment_id, key, name, state)
    path = ui_view.view_path(parent.info.experiment_id, key)
    return f"{ui_view.ui_url(store.tracking_uri())}/{path}"


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
