"""The MLflow UI opened on a pipeline run's comparison: a saved view of the experiment page.

The experiment page of MLflow 3.17 shares a view of itself (which runs are shown, how they are
grouped, which charts) as an experiment tag, `mlflow.sharedViewState.<key>`, and opens it from
the address `#/experiments/<id>/runs?viewStateShareKey=<key>`. The pipeline writes one such view
per pipeline run when it is evaluated: the method runs of that pipeline run only, all of them
shown, grouped by method, in the chart view; the runs table of the same view shows the method,
the code length and the scores as columns.

Each score is drawn against the code length: the score step logs it a second time as
`<score>_by_bits` at step = bits (shdh.tracking.mlflow_runs.by_bits), and a line chart of that
metric with the step as its x axis draws, for each method, one line through its code lengths
(the seeds of a length drawn as their mean and spread), named in the chart's legend. So a
method and a code length are read off the chart, where a bar chart of (method, bits) groups
showed 60 unlabelled bars for 20 methods.
The first section holds the headline scores (NDCG@n, mAP@1000, mAHP@2500), one chart a row, the
second the per-epoch loss (the mean over the code lengths and seeds of a method); MLflow's own
section of every other metric follows, folded, with the charts MLflow makes of them (a line for
a `_by_bits` twin, a bar a method for a score at step 0). A chart card takes some 550 of the
8,000 characters a tag may hold, and the tag holds the state twice (save_view): the view charts
no more than these.

Everything here is MLflow's front-end state, which is not a public API: the field names are
those of MLflow 3.17's bundle (mlflow/server/js/build), checked by tests/browser against the
real UI. A UI that does not know a field ignores it and shows its defaults, so an older or newer
MLflow opens a plainer page, never an error. What the view cannot set: a group's colour, which
MLflow 3.17 takes from a hash of the group's name into its 29 colours (or from the colour a user
picks in the runs list, kept in that browser), so among twenty methods a few share a colour; the
legend names every line and a point's tooltip its method and code length.
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
from shdh.tracking.mlflow_runs import PIPELINE_TAG, by_bits_key, metric_key

VIEW_TAG_PREFIX = "mlflow.sharedViewState."  # the experiment tag of a shared view
VIEW_QUERY = "viewStateShareKey"  # the address's parameter that names the view
CHART_MODE = "compareRunsMode=CHART"  # the address's parameter of the chart view
DEFAULT_UI = "http://127.0.0.1:5000"  # where `mlflow ui` serves by default
TAG_VALUE_LIMIT = 8000  # MLflow's limit on a tag value
# The metrics of a method run plotted per epoch; the scores are one value per run.
EPOCH_METRICS = ("loss",)
# The headline scores beside NDCG@n: the peers' mAP@1000 and HPDH's mAHP@2500.
HEADLINE_PEERS = ("map@1000", "mahp@2500")
# The view's sections, in order; MLflow's section of the charts whose names have no "/" is
# OTHER_SECTION: the other metrics go there, folded.
HEADLINE_SECTION = "Headline scores by code length"
EPOCH_SECTION = "Training, per epoch"
OTHER_SECTION = "Model metrics"
# Each section's charts a row, and their height in pixels (MLflow's defaults: 3 and 360). A
# chart's legend is one line high, so a wide chart names the most methods in it.
HEADLINE_COLUMNS, EPOCH_COLUMNS, CARD_HEIGHT = 1, 2, 420
_NDCG_AT = re.compile(r"ndcg@(\d+)")
_HEADLINE = re.compile(r"ndcg_at_\d+|" + "|".join(re.escape(metric_key(m)) for m in HEADLINE_PEERS))


def view_key(pipeline_id: str) -> str:
    """The key of a pipeline run's view: one per pipeline run, rewritten when it is rerun."""
    if not 0 < len(pipeline_id) <= 190:
        raise ValueError(f"pipeline run id {pipeline_id!r}: expected 1 to 190 characters")
    return metric_key(f"shdh-{pipeline_id}")


def by_bits_scores(n: int) -> list[str]:
    """The scores the view draws against the code length, as metrics.json names them: the
    headline ones (NDCG@n, mAP@1000, mAHP@2500), then the results table's others at n. The
    score step logs each as `<score>_by_bits` at step = bits (shdh.tracking.mlflow_runs)."""
    others = [f"{c}@{n}" for c in TABLE_COLUMNS if c != "ndcg"]
    return [f"ndcg@{n}", *HEADLINE_PEERS, *others]


def charted_scores(scores: dict[str, Any]) -> list[str]:
    """The MLflow names of the scores the view charts, headline ones first (by_bits_scores at
    the results' n), those the results hold, from metrics.json's {method: {bits: {...}}}."""
    rows = [row for by_bits in scores.values() for row in by_bits.values()]
    found = sorted({int(m[1]) for row in rows for k in row if (m := _NDCG_AT.fullmatch(k))})
    if len(found) != 1:
        raise ValueError(
            f"metrics.json: expected the scores at one n (ndcg@n), found n = {found or 'none'}"
        )
    held = {k for row in rows for k in row}
    return [metric_key(name) for name in by_bits_scores(found[0]) if name in held]


def is_headline(score: str) -> bool:
    """Whether a score (its MLflow name) goes in the view's first section."""
    return _HEADLINE.fullmatch(score) is not None


def view_state(
    pipeline_id: str,
    scores: Sequence[str],
    *,
    epoch_metrics: Sequence[str] = EPOCH_METRICS,
) -> dict[str, Any]:
    """The experiment page's state: pipeline run `pipeline_id`'s method runs, grouped by the
    tag method; a line chart against the code length of each headline one (is_headline) of
    `scores` (MLflow metric names, the first one sorting the table, all of them columns of the
    table), and a line chart of each of `epoch_metrics` against the epoch."""
    if not scores:
        raise ValueError("a comparison view needs at least one score to chart")
    if "'" in pipeline_id:  # it is quoted in the view's search filter
        raise ValueError(f"pipeline run id {pipeline_id!r}: a quote cannot be searched for")
    headline, epochs = _uuid(), _uuid()
    cards = [_by_bits(name, headline) for name in scores if is_headline(name)]
    cards += [_line(name, epochs) for name in epoch_metrics]
    sections = [
        _section(headline, HEADLINE_SECTION, columns=HEADLINE_COLUMNS),
        _section(epochs, EPOCH_SECTION, columns=EPOCH_COLUMNS),
        # Any other metric (fit_seconds, ...) folded below them.
        _section(_uuid(), OTHER_SECTION, display=False),
    ]
    used = {card["metricSectionId"] for card in cards}
    return {
        # Method runs carry the method tag; the pipeline run itself does not.
        "searchFilter": f"tags.`{PIPELINE_TAG}` = '{pipeline_id}' and tags.method != ''",
        "orderByKey": f"metrics.`{scores[0]}`",
        "orderByAsc": False,
        "runsHiddenMode": "SHOW_ALL",  # the default hides every run after the tenth
        # One group a method: its line joins its code lengths; the legend names it alone.
        "groupBy": {
            "aggregateFunction": "average",
            "groupByKeys": [{"mode": "tag", "groupByData": "method"}],
        },
        "useGroupedValuesInCharts": True,
        "hideEmptyCharts": True,
        "compareRunCharts": cards,
        "compareRunSections": [s for s in sections if s["uuid"] in used or not s["display"]],
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


def _section(
    section_id: str, name: str, *, display: bool = True, columns: int | None = None
) -> dict[str, Any]:
    section = {"uuid": section_id, "name": name, "display": display, "isReordered": True}
    if columns is not None:
        section.update(columns=columns, cardHeight=CARD_HEIGHT)
    return section


def _card(kind: str, metric: str, section: str, title: str) -> dict[str, Any]:
    """What every chart card has: MLflow adds a chart of its own for a metric without one."""
    return {
        "uuid": _uuid(),
        "type": kind,
        "metricSectionId": section,
        "metricKey": metric,
        "displayName": title,
        "deleted": False,
        "isGenerated": False,
        "runsCountToCompare": 500,  # every run drawn, however many (the view shows them all)
    }


def _line(metric: str, section: str, title: str | None = None) -> dict[str, Any]:
    """A curve against the step: the epoch of a fit's per-epoch metrics, the code length of a
    score's `_by_bits` twin."""
    return {
        **_card("LINE", metric, section, title or metric),
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


def _by_bits(score: str, section: str) -> dict[str, Any]:
    """A score against the code length, a point at each length a method was scored at."""
    line = _line(by_bits_key(score), section)  # MLflow 3.17 titles a card by its metric
    return {**line, "displayPoints": True}
