"""The MLflow UI's saved view of a pipeline run's methods compared: the state the experiment
page reads (field names of MLflow 3.17's UI), the tag that holds it, and its address. What the
UI then shows is tests/browser's."""

from __future__ import annotations

import json

import pytest

from shdh.reporting import ui_view

SCORES = ["ndcg_at_100", "map_at_1000", "mahp_at_2500", "acg_at_100"]


class Experiments:
    """The one client call save_view makes, recorded."""

    def __init__(self) -> None:
        self.tags: dict[tuple[str, str], str] = {}

    def set_experiment_tag(self, experiment_id: str, key: str, value: str) -> None:
        self.tags[(experiment_id, key)] = value


def test_the_view_draws_each_method_as_a_line_through_its_code_lengths():
    state = ui_view.view_state("p1", SCORES)
    assert state["searchFilter"] == "tags.`shdh.pipeline_run_id` = 'p1' and tags.method != ''"
    assert state["orderByKey"] == "metrics.`ndcg_at_100`" and state["orderByAsc"] is False
    assert state["runsHiddenMode"] == "SHOW_ALL"
    # One group a method (its seeds and code lengths): its line's legend entry is its name.
    assert state["groupBy"] == {
        "aggregateFunction": "average",
        "groupByKeys": [{"mode": "tag", "groupByData": "method"}],
    }
    assert state["useGroupedValuesInCharts"] is True
    headline, epochs, folded = state["compareRunSections"]
    assert [s["name"] for s in (headline, epochs, folded)] == [
        "Headline scores by code length",
        "Training, per epoch",
        "Model metrics",  # where MLflow adds a chart of any other metric
    ]
    assert headline["display"] and epochs["display"] and not folded["display"]
    assert headline["columns"] == 1 and headline["cardHeight"] > 360  # wide: a long legend
    charts = [
        (c["type"], c["metricKey"], c["metricSectionId"], c["xAxisKey"])
        for c in state["compareRunCharts"]
    ]
    assert charts == [
        ("LINE", "ndcg_at_100_by_bits", headline["uuid"], "step"),
        ("LINE", "map_at_1000_by_bits", headline["uuid"], "step"),
        ("LINE", "mahp_at_2500_by_bits", headline["uuid"], "step"),
        ("LINE", "loss", epochs["uuid"], "step"),
    ]
    for card in state["compareRunCharts"]:
        assert card["selectedMetricKeys"] == [card["metricKey"]]
        assert card["useGlobalXaxisKey"] is False  # the page's x axis setting does not apply
    first = state["compareRunCharts"][0]
    assert first["displayName"] == "ndcg_at_100_by_bits"
    assert first["displayPoints"] is True  # a point at each code length
    # Every score a column of the runs table; the others' charts are MLflow's, folded.
    assert [f"metrics.`{s}`" for s in SCORES] == state["selectedColumns"][3:]


def test_a_view_of_the_scores_alone_has_no_empty_section():
    state = ui_view.view_state("p1", ["ndcg_at_100"], epoch_metrics=())
    names = [s["name"] for s in state["compareRunSections"]]
    assert names == ["Headline scores by code length", "Model metrics"]


def test_the_view_fits_in_a_tag_with_the_longest_pipeline_run_id():
    scores = ui_view.charted_scores(
        {"shdh": {"16": dict.fromkeys(ui_view.by_bits_scores(100), 0.5)}}
    )
    client = Experiments()
    state = ui_view.view_state("p" * 190, scores)
    ui_view.save_view(client, "7", "shdh-p1", "Methods of run-a", state)
    assert len(next(iter(client.tags.values()))) <= ui_view.TAG_VALUE_LIMIT


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
    state = ui_view.view_state("p1", SCORES, epoch_metrics=[f"metric_{i}" for i in range(20)])
    with pytest.raises(ValueError, match="shdh-p1 is .* over MLflow's limit of 8000"):
        ui_view.save_view(Experiments(), "7", "shdh-p1", "too many", state)


def test_charted_scores_are_the_headline_ones_then_the_tables_others_at_its_n():
    row = {"acg@50": 1.0, "ndcg@50": 0.5, "ndcg@50_sd": 0.1, "seeds": 2}
    row |= {"dcg@50": 1.0, "ndcg_list@50": 0.5, "wr@50": 0.1, "map@1000": 0.3, "mahp@2500": 0.4}
    assert ui_view.charted_scores({"shdh": {"16": row}}) == [
        "ndcg_at_50",
        "map_at_1000",
        "mahp_at_2500",
        "acg_at_50",
        "dcg_at_50",
        "ndcg_list_at_50",
        "wr_at_50",
    ]
    assert [ui_view.is_headline(s) for s in ui_view.charted_scores({"shdh": {"16": row}})] == [
        True,
        True,
        True,
        False,
        False,
        False,
        False,
    ]
    # What the results do not hold is not charted (an empty chart would stand in the view).
    assert ui_view.charted_scores({"shdh": {"16": {"ndcg@50": 0.5}}}) == ["ndcg_at_50"]
    mixed = {"shdh": {"16": {"ndcg@50": 0.5}}, "dpsh": {"16": {"ndcg@100": 0.5}}}
    with pytest.raises(ValueError, match=r"one n \(ndcg@n\), found n = \[50, 100\]"):
        ui_view.charted_scores(mixed)
    with pytest.raises(ValueError, match="found n = none"):
        ui_view.charted_scores({"shdh": {"16": {"acg@50": 1.0}}})


def test_the_score_step_logs_each_charted_score_against_the_code_length():
    from shdh.tracking import mlflow_runs

    metrics = {"ndcg@100": 0.5, "map@1000": 0.25, "map@all": 0.2, "wr@1000": 0.1}
    assert mlflow_runs.by_bits(metrics, ui_view.by_bits_scores(100)) == {
        "ndcg_at_100_by_bits": 0.5,
        "map_at_1000_by_bits": 0.25,
    }
    charted = ui_view.charted_scores({"m": {"16": dict.fromkeys(ui_view.by_bits_scores(100), 0)}})
    cards = ui_view.view_state("p1", charted, epoch_metrics=())["compareRunCharts"]
    headline = [mlflow_runs.by_bits_key(s) for s in charted if ui_view.is_headline(s)]
    assert [c["metricKey"] for c in cards] == headline


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
