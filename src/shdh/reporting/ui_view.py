"""The MLflow UI opened on a pipeline run's comparison: a saved view of the experiment page.

The experiment page of MLflow 3.17 shares a view of itself (which runs are shown, how they are
grouped, which charts) as an experiment tag, `mlflow.sharedViewState.<key>`, and opens it from
the address `#/experiments/<id>/runs?viewStateShareKey=<key>`. The pipeline writes one such view
per pipeline run when it is evaluated: the method runs of that pipeline run only, all of them
shown, grouped by method and code length (the seeds of a group drawn as their mean and spread),
one bar chart per score and the per-epoch loss, in the chart view; the runs table of the same
view shows the method, the code length and the scores as columns.

Everything here is MLflow's front-end state, which is not a public API: the field names are
those of MLflow 3.17's bundle (mlflow/server/js/build), checked by tests/browser against the
real UI. A UI that does not know a field ignores it and shows its defaults, so an older or newer
MLflow opens a plainer page, never an error.
"""

from __future__ import annotations

import json
import re
import time
import urllib.parse
import uuid
from collections.abc import Sequence
from typing import Any

from shdh.reporting.report import TABLE_COLUMNS
from shdh.tracking.mlflow_runs import PIPELINE_TAG, metric_key

VIEW_TAG_PREFIX = "mlflow.sharedViewState."  # the experiment tag of a shared view
VIEW_QUERY = "viewStateShareKey"  # the address's parameter that names the view
CHART_MODE = "compareRunsMode=CHART"  # the address's parameter of the chart view
DEFAULT_UI = "http://127.0.0.1:5000"  # where `mlflow ui` serves by default
TAG_VALUE_LIMIT = 8000  # MLflow's limit on a tag value
# The metrics of a method run plotted per epoch; the scores are one value per run.
EPOCH_METRICS = ("loss",)
# MLflow's section of the charts whose names have no "/": the other metrics go there, folded.
OTHER_SECTION = "Model metrics"
_NDCG_AT = re.compile(r"ndcg@(\d+)")


def view_key(pipeline_id: str) -> str:
    """The key of a pipeline run's view: one per pipeline run, rewritten when it is rerun."""
    if not 0 < len(pipeline_id) <= 190:
        raise ValueError(f"pipeline run id {pipeline_id!r}: expected 1 to 190 characters")
    return metric_key(f"shdh-{pipeline_id}")


def charted_scores(scores: dict[str, Any]) -> list[str]:
    """The MLflow names of the scores the results table shows (shdh.reporting.report.TABLE_COLUMNS
    at its n), NDCG@n first, from metrics.json's {method: {bits: {"ndcg@100": ...}}}."""
    rows = [row for by_bits in scores.values() for row in by_bits.values()]
    found = sorted({int(m[1]) for row in rows for k in row if (m := _NDCG_AT.fullmatch(k))})
    if len(found) != 1:
        raise ValueError(
            f"metrics.json: expected the scores at one n (ndcg@n), found n = {found or 'none'}"
        )
    columns = sorted(TABLE_COLUMNS, key=lambda c: c != "ndcg")
    return [metric_key(f"{c}@{found[0]}") for c in columns]


def view_state(
    pipeline_id: str,
    scores: Sequence[str],
    *,
    epoch_metrics: Sequence[str] = EPOCH_METRICS,
) -> dict[str, Any]:
    """The experiment page's state: pipeline run `pipeline_id`'s method runs, grouped by the
    tags method and bits (mean over seeds), a bar chart of each of `scores` (MLflow metric
    names, the first one sorting the table) and a line chart of each of `epoch_metrics`."""
    if not scores:
        raise ValueError("a comparison view needs at least one score to chart")
    if "'" in pipeline_id:  # it is quoted in the view's search filter
        raise ValueError(f"pipeline run id {pipeline_id!r}: a quote cannot be searched for")
    section = _uuid()
    cards = [_bar(name, section) for name in scores]
    cards += [_line(name, section) for name in epoch_metrics]
    return {
        # Method runs carry the method tag; the pipeline run itself does not.
        "searchFilter": f"tags.`{PIPELINE_TAG}` = '{pipeline_id}' and tags.method != ''",
        "orderByKey": f"metrics.`{scores[0]}`",
        "orderByAsc": False,
        "runsHiddenMode": "SHOW_ALL",  # the default hides every run after the tenth
        "groupBy": {
            "aggregateFunction": "average",
            "groupByKeys": [
                {"mode": "tag", "groupByData": "method"},
                {"mode": "tag", "groupByData": "bits"},
            ],
        },
        "useGroupedValuesInCharts": True,
        "hideEmptyCharts": True,
        "compareRunCharts": cards,
        # The scores first and open; any other metric (fit_seconds, ...) folded below them.
        "compareRunSections": [
            _section(section, "Methods compared", display=True),
            _section(_uuid(), OTHER_SECTION, display=False),
        ],
        "isAccordionReordered": True,
        "selectedColumns": [
            "tags.`method`",
            "tags.`bits`",
            "tags.`seed`",
            *(f"metrics.`{name}`" for name in scores),
        ],
    }


def save_view(client: Any, experiment_id: str, key: str, name: str, state: dict) -> None:
    """Write `state` as the experiment's shared view `key`, titled `name`.

    MLflow 3.17 lists saved views by name and reads a view from an envelope, {name, createdAt,
    updatedAt, state: the state as a JSON string}; MLflow 2.x and early 3.x read the state
    itself, taking the fields they know from the top level. The value holds both, so either UI
    opens the same view.
    """
    now = int(time.time() * 1000)
    inner = json.dumps(state, separators=(",", ":"))
    value = json.dumps(
        {"name": name, "createdAt": now, "updatedAt": now, "state": inner, **state},
        separators=(",", ":"),
    )
    if len(value) > TAG_VALUE_LIMIT:
        raise ValueError(
            f"the comparison view {key} is {len(value)} characters, over MLflow's limit of "
            f"{TAG_VALUE_LIMIT} for a tag value: chart fewer metrics"
        )
    client.set_experiment_tag(experiment_id, f"{VIEW_TAG_PREFIX}{key}", value)


def view_path(experiment_id: str, key: str) -> str:
    """The address of the view inside the UI (after its host), the chart view open."""
    query = urllib.parse.urlencode({VIEW_QUERY: key})
    return f"#/experiments/{experiment_id}/runs?{query}&{CHART_MODE}"


def ui_url(tracking_uri: str) -> str:
    """Where a user opens the UI of `tracking_uri`: a tracking server is its own UI (without
    any credentials in its address); a file or database store is served by `mlflow ui`."""
    parts = urllib.parse.urlsplit(tracking_uri)
    if parts.scheme not in ("http", "https"):
        return DEFAULT_UI
    host = parts.netloc.rsplit("@", 1)[-1]
    return urllib.parse.urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))


def _uuid() -> str:
    return str(uuid.uuid4())


def _section(section_id: str, name: str, *, display: bool) -> dict[str, Any]:
    return {"uuid": section_id, "name": name, "display": display, "isReordered": True}


def _card(kind: str, metric: str, section: str) -> dict[str, Any]:
    """What every chart card has: MLflow adds a chart of its own for a metric without one."""
    return {
        "uuid": _uuid(),
        "type": kind,
        "metricSectionId": section,
        "metricKey": metric,
        "displayName": metric,
        "deleted": False,
        "isGenerated": False,
        "runsCountToCompare": 100,
    }


def _bar(metric: str, section: str) -> dict[str, Any]:
    return {**_card("BAR", metric, section), "selectedMetricKeys": [metric]}


def _line(metric: str, section: str) -> dict[str, Any]:
    """A per-epoch curve against the step, which the fits log as the epoch number."""
    return {
        **_card("LINE", metric, section),
        "selectedMetricKeys": [metric],
        "xAxisKey": "step",
        "xAxisScaleType": "linear",
        "scaleType": "linear",
        "lineSmoothness": 0,
        "useGlobalXaxisKey": False,
        "useGlobalLineSmoothing": False,
        "ignoreOutliers": False,
        "yAxisKey": "metric",
        "yAxisExpressions": [],
        "range": {},
    }
