"""The MLflow UI's saved view of a pipeline run's methods compared: the state the experiment
page reads (field names of MLflow 3.17's UI), the tag that holds it, and its address. What the
UI then shows is tests/browser's."""

from __future__ import annotations

import json

import pytest

from shdh.reporting import ui_view

SCORES = ["ndcg_at_100", "acg_at_100"]


class Experiments:
    """The one client call save_view makes, recorded."""

    def __init__(self) -> None:
        self.tags: dict[tuple[str, str], str] = {}

    def set_experiment_tag(self, experiment_id: str, key: str, value: str) -> None:
        self.tags[(experiment_id, key)] = value


def test_the_view_shows_one_pipeline_runs_methods_grouped_with_a_chart_per_score():
    state = ui_view.view_state("p1", SCORES)
    assert state["searchFilter"] == "tags.`shdh.pipeline_run_id` = 'p1' and tags.method != ''"
    assert state["orderByKey"] == "metrics.`ndcg_at_100`" and state["orderByAsc"] is False
    assert state["runsHiddenMode"] == "SHOW_ALL"
    assert state["groupBy"] == {
        "aggregateFunction": "average",
        "groupByKeys": [
            {"mode": "tag", "groupByData": "method"},
            {"mode": "tag", "groupByData": "bits"},
        ],
    }
    charts = [(c["type"], c["metricKey"]) for c in state["compareRunCharts"]]
    assert charts == [("BAR", "ndcg_at_100"), ("BAR", "acg_at_100"), ("LINE", "loss")]
    opened, folded = state["compareRunSections"]
    assert opened["display"] and not folded["display"]
    assert folded["name"] == "Model metrics"  # where MLflow adds a chart of any other metric
    assert {c["metricSectionId"] for c in state["compareRunCharts"]} == {opened["uuid"]}
    assert "metrics.`ndcg_at_100`" in state["selectedColumns"]


def test_a_view_without_a_score_or_of_an_unsearchable_run_is_refused():
    with pytest.raises(ValueError, match="at least one score"):
        ui_view.view_state("p1", [])
    with pytest.raises(ValueError, match='pipeline run id "p\'1": a quote'):
        ui_view.view_state("p'1", SCORES)


def test_the_tag_reads_as_a_named_view_and_as_the_state_itself():
    client = Experiments()
    state = ui_view.view_state("p1", SCORES)
    ui_view.save_view(client, "7", "shdh-p1", "Methods of run-a", state)
    (((experiment, key), value),) = client.tags.items()
    assert (experiment, key) == ("7", "mlflow.sharedViewState.shdh-p1")
    stored = json.loads(value)
    # MLflow 3.17: an envelope with a name, times in ms and the state as a JSON string...
    assert stored["name"] == "Methods of run-a"
    assert isinstance(stored["createdAt"], int) and stored["updatedAt"] == stored["createdAt"]
    assert json.loads(stored["state"]) == state
    # ...earlier UIs: the state's fields at the top level.
    assert {k: stored[k] for k in state} == state


def test_a_view_over_mlflows_tag_limit_is_refused_by_name():
    state = ui_view.view_state("p1", [f"metric_{i}_at_100" for i in range(60)])
    with pytest.raises(ValueError, match="shdh-p1 is .* over MLflow's limit of 8000"):
        ui_view.save_view(Experiments(), "7", "shdh-p1", "too many", state)


def test_charted_scores_are_the_tables_columns_at_its_n_ndcg_first():
    scores = {"shdh": {"16": {"acg@50": 1.0, "ndcg@50": 0.5, "ndcg@50_sd": 0.1, "seeds": 2}}}
    assert ui_view.charted_scores(scores) == [
        "ndcg_at_50",
        "acg_at_50",
        "dcg_at_50",
        "ndcg_list_at_50",
        "wr_at_50",
    ]
    mixed = {"shdh": {"16": {"ndcg@50": 0.5}}, "dpsh": {"16": {"ndcg@100": 0.5}}}
    with pytest.raises(ValueError, match=r"one n \(ndcg@n\), found n = \[50, 100\]"):
        ui_view.charted_scores(mixed)
    with pytest.raises(ValueError, match="found n = none"):
        ui_view.charted_scores({"shdh": {"16": {"acg@50": 1.0}}})


def test_the_address_opens_the_chart_view_on_the_ui_of_the_store():
    assert ui_view.view_key("abc") == "shdh-abc"
    with pytest.raises(ValueError, match="pipeline run id '': expected 1 to 190"):
        ui_view.view_key("")
    with pytest.raises(ValueError, match="expected 1 to 190 characters"):
        ui_view.view_key("a" * 191)
    path = ui_view.view_path("3", "shdh-abc")
    assert path == "#/experiments/3/runs?viewStateShareKey=shdh-abc&compareRunsMode=CHART"
    assert ui_view.ui_url("sqlite:////repo/mlflow.db") == "http://127.0.0.1:5000"
    # A server is its own UI; credentials in its address stay out of a printed link.
    assert ui_view.ui_url("https://alice:pw@mlflow.example:5000/") == "https://mlflow.example:5000"
