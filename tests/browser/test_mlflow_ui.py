"""Comparing runs in the MLflow UI, as users do, in a real browser.

A real `mlflow server` on SQLite, two smoke pipeline runs tracked into it (the dvc.yaml commands,
then `train.epochs: 2` with training, evaluation and registration rerun, as `dvc exp run -S
train.epochs=2` does), and MLflow's own web UI opened in Debian's headless Chromium. The test
asserts what a user sees: the saved view of a pipeline run's methods, opened from the link in
its description, with every method charted and no click; the runs table with the pipeline runs,
one expanded into a run per method with its NDCG@100; the comparison views of two methods and of
two pipeline runs; the parent's HTML report with its figures loaded; the champion in the Model
Registry. Its screenshots are the pictures of docs/mlflow.md.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from shdh.settings.profiles import deep_merge
from shdh.tracking.mlflow_runs import metric_key
from shdh.tracking.model_registry import DEFAULT_ALIAS, DEFAULT_METRIC, DEFAULT_MODEL_NAME
from tests.browser import ui
from tests.browser.ui import start_browser, wait_for
from tests.conftest import REPO
from tests.mlflow_server import serve
from tests.pipelines.front_doors import (
    dvc_commands,
    dvc_params_file,
    run_dvc_command,
    run_dvc_stages,
    smoke_settings,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]
# docs/mlflow.md's pictures are this test's screenshots: `SHDH_SCREENSHOTS=docs make test` (or
# the browser tests alone) rewrites them. Otherwise they go to pytest's temporary folder, so that
# a test run leaves the checkout as it found it (the pictures differ run by run: times, run ids).
UPDATE_DOCS = os.environ.get("SHDH_SCREENSHOTS") == "docs"


@pytest.fixture(scope="module")
def screenshots(tmp_path_factory) -> Path:
    return REPO / "docs" / "images" if UPDATE_DOCS else tmp_path_factory.mktemp("screenshots")


# Both deep methods and a plain and a +H shallow one: every kind of run, at half the smoke cost.
METHODS = ("shdh", "dpsh", "itq", "ksh+h")


@pytest.fixture(scope="module")
def server(tmp_path_factory) -> Iterator[str]:
    """`mlflow server` on SQLite with local artifacts, as `mlflow ui` serves a run's store."""
    root = tmp_path_factory.mktemp("mlflow-ui")
    with serve(root, ["--artifacts-destination", str(root / "artifacts")], {}) as running:
        yield running["url"]


def track_two_pipeline_runs(url: str, work: Path) -> dict[str, Any]:
    """The smoke pipeline, then the same with two epochs (training and evaluation only, the
    rest cached as DVC would); returns both params files and the first run's scores."""
    params = smoke_settings(METHODS)
    first = dvc_params_file(params, work)
    second = work / "params-epochs2.yaml"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", url)
        mp.chdir(REPO)  # data.dvc and the git commit, as a user runs it
        run_dvc_stages(first, params)
        scores = json.loads((work / "results" / "metrics.json").read_text())
        changed = deep_merge(yaml.safe_load(first.read_text()), {"train": {"epochs": 2}})
        second.write_text(yaml.safe_dump(changed, sort_keys=False))
        rerun = [
            c
            for c in dvc_commands(changed)
            if c.startswith(("shdh train --method", "shdh evaluate", "shdh register"))
        ]
        for command in rerun:
            run_dvc_command(command, second)
    return {"first": first, "second": second, "scores": scores, "params": params}


@pytest.fixture(scope="module")
def tracked(server, tmp_path_factory) -> dict[str, Any]:
    import mlflow

    start = time.monotonic()
    runs = track_two_pipeline_runs(server, tmp_path_factory.mktemp("smoke"))
    print(f"two smoke pipeline runs tracked in {time.monotonic() - start:.0f} s")
    client = mlflow.MlflowClient(tracking_uri=server)
    experiment = client.get_experiment_by_name("shdh")
    found = client.search_runs([experiment.experiment_id], max_results=200)
    parents = sorted(
        (r for r in found if r.data.tags.get("shdh.role") == "pipeline"),
        key=lambda r: r.info.start_time,
    )
    children = {
        p.info.run_id: {
            r.info.run_name: r
            for r in found
            if r.data.tags.get("mlflow.parentRunId") == p.info.run_id
        }
        for p in parents
    }
    return {**runs, "experiment": experiment, "parents": parents, "children": children}


def close_to(shown: str, value: float) -> bool:
    """The UI rounds a metric to about three decimals in comparisons, prints it whole in tables."""
    return abs(float(shown) - value) <= 6e-4 + 5e-4 * abs(value)


def test_the_runs_table_shows_each_pipeline_run_and_unfolds_into_its_methods(
    server, tracked, browser, screenshots
):
    experiment = tracked["experiment"]
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    first, second = tracked["parents"]
    children = tracked["children"][first.info.run_id]
    assert set(children) == {f"{m}-16" for m in (*METHODS, "random")}
    assert set(tracked["children"][second.info.run_id]) == set(children)
    ui.open_model_training(browser, server, experiment.experiment_id)
    for parent in (first, second):
        wait_for(
            lambda p=parent: p.info.run_name in ui.row_text(browser, p.info.run_id),
            f"the pipeline run {parent.info.run_name}",
            browser,
        )
    ui.show_metric_column(browser, "ndcg_at_100")
    ui.expand_run(browser, first.info.run_name)
    for name, run in children.items():
        ndcg = run.data.metrics["ndcg_at_100"]

        def shown(run=run, name=name, ndcg=ndcg) -> bool:
            cells = ui.row_text(browser, run.info.run_id).split(" | ")
            return name in cells and any(close_to(v, ndcg) for v in ui.as_text_numbers(cells))

        wait_for(shown, f"the method run {name} with NDCG@100 {ndcg:.4f}", browser)
    assert ui.screenshot(browser, screenshots / "mlflow-runs.png").stat().st_size > 10_000


def test_comparing_two_methods_shows_both_metrics(server, tracked, browser, screenshots):
    first = tracked["parents"][0]
    children = tracked["children"][first.info.run_id]
    pair = [children["shdh-16"], children["dpsh-16"]]
    ui.open_comparison(browser, server, first.info.experiment_id, [r.info.run_id for r in pair])
    assert ui.compare_row(browser, "method") == ["shdh", "dpsh"]
    for metric in ("acg_at_100", "ndcg_at_100"):
        shown = ui.compare_row(browser, metric)
        assert len(shown) == 2, (metric, shown)
        for text, run in zip(shown, pair, strict=True):
            assert close_to(text, run.data.metrics[metric]), (metric, text, run.info.run_name)
    shot = ui.screenshot(browser, screenshots / "mlflow-compare-methods.png")
    assert shot.stat().st_size > 10_000


def test_comparing_two_pipeline_runs_shows_each_method_beside_itself(
    server, tracked, browser, screenshots
):
    first, second = tracked["parents"]
    ui.open_comparison(
        browser, server, first.info.experiment_id, [first.info.run_id, second.info.run_id]
    )
    assert ui.compare_row(browser, "train.epochs") == ["1", "2"]
    shot = ui.screenshot(browser, screenshots / "mlflow-compare-pipelines.png")
    assert shot.stat().st_size > 10_000
    # Per-method metrics live on the method runs only: a method of one pipeline run beside the
    # same method of the other, its scores side by side.
    for method in ("dpsh", "shdh"):
        pair = [
            next(
                r
                for name, r in tracked["children"][p.info.run_id].items()
                if name.startswith(f"{method}-16")
            )
            for p in (first, second)
        ]
        assert not any(
            k.startswith("ndcg_at_100/") for p in (first, second) for k in p.data.metrics
        )
        ui.open_comparison(browser, server, first.info.experiment_id, [r.info.run_id for r in pair])
        shown = ui.compare_row(browser, "ndcg_at_100")
        assert len(shown) == 2, (method, shown)
        for text, run in zip(shown, pair, strict=True):
            assert close_to(text, run.data.metrics["ndcg_at_100"]), (method, text)


HEADLINE = ("ndcg_at_100", "map_at_1000", "mahp_at_2500")


def headline_charts(browser: Any, methods: set[str]) -> list[dict[str, Any]]:
    """The view's charts of NDCG@100, mAP@1000 and mAHP@2500 against the code length, in that
    order, once each draws a line per method and its legend names every method. A chart out of
    the window is drawn only while scrolled to, and one scrolled into view is redrawn (its
    legend may be new while its lines are still another chart's), so a chart counts only once
    every line it draws is of its legend's score, and each poll brings the next plot into view."""
    found: dict[str, dict[str, Any]] = {}
    polls = [0]
    seen: list[list[Any]] = [[]]  # the last poll's charts, for the failure's message

    def complete(chart: dict[str, Any], score: str) -> bool:
        legend, key = chart["legend"], f"{score}_by_bits"
        return (
            all(e.endswith(f" ({key})") for e in legend)
            and {legend_method(e, score) for e in legend} == methods
            and all(t["metric"] == key for t in chart["traces"])
            and {line_method(t) for t in chart["traces"]} == methods
        )

    def drawn() -> list[dict[str, Any]]:
        charts = ui.line_charts(browser)
        seen[0] = [
            (c["legend"], sorted({(t["metric"], line_method(t)) for t in c["traces"]}))
            for c in charts
        ]
        for chart in charts:
            for score in HEADLINE:
                if score not in found and complete(chart, score):
                    found[score] = chart
        polls[0] += 1
        browser.execute_script(
            "const p = [...document.querySelectorAll('.js-plotly-plot')];"
            "if (p.length) p[arguments[0] % p.length].scrollIntoView({block: 'center'});",
            polls[0] // 2,  # each place held for two polls: time for a redraw to finish
        )
        return [found[s] for s in HEADLINE] if len(found) == len(HEADLINE) else []

    try:
        # generous: 63 runs are charted by a browser that shares two busy cores with the tests
        charts = wait_for(drawn, "a line per method in each headline chart", browser, 240)
    except pytest.fail.Exception as failed:
        raise AssertionError(
            f"the headline charts seen complete: {sorted(found)}; the last poll's charts "
            f"(legend, [(metric, method)]): {seen[0]}"
        ) from failed
    browser.execute_script("window.scrollTo(0, 0);")
    return charts


def legend_method(entry: str, score: str) -> str:
    """A legend entry's group, the method: MLflow names a line 'GROUP (METRIC)'."""
    suffix = f" ({score}_by_bits)"
    return entry[: -len(suffix)] if entry.endswith(suffix) else entry


def line_method(trace: dict[str, Any]) -> str:
    """A line's method: MLflow's group of runs by the method tag is 'tag.method.NAME'."""
    return trace["group"].removeprefix("tag.method.")


def lines_of(chart: dict[str, Any]) -> dict[str, tuple[tuple[float, ...], tuple[float, ...]]]:
    """A chart's lines by method as (x, y): a line may be drawn twice (its points and its
    hover), both the same."""
    lines: dict[str, tuple[tuple[float, ...], tuple[float, ...]]] = {}
    for trace in chart["traces"]:
        line = (tuple(trace["x"]), tuple(trace["y"]))
        assert lines.setdefault(line_method(trace), line) == line, (trace["group"], lines)
    return lines


def test_the_link_in_a_pipeline_runs_description_opens_its_methods_charted(
    server, tracked, screenshots
):
    """A new user (a fresh browser profile) follows the link: with no toggle, no 'Show all
    runs' and no group-by to set, the saved view shows every method of that pipeline run, and
    only its runs, as a line per method against the code length in each headline chart."""
    second = tracked["parents"][-1]
    note = second.data.tags["mlflow.note.content"]
    (link,) = re.findall(r"\]\((#/experiments/[^)]+)\)", note)
    assert "viewStateShareKey=" in link and "compareRunsMode=CHART" in link
    children = tracked["children"][second.info.run_id]
    by_method = {r.data.tags["method"]: r for r in children.values()}
    browser = start_browser()
    try:
        ui.open_view(browser, server, link)
        ndcg, *_ = headline_charts(browser, set(by_method))
        # A point at the code length (step = bits): each method's score (one seed: the group's
        # mean); the second pipeline run's deep scores, not a mean with the first's.
        expected = {
            method: ((int(r.data.tags["bits"]),), (round(r.data.metrics[DEFAULT_METRIC], 3),))
            for method, r in by_method.items()
        }
        drawn = {m: (x, tuple(round(v, 3) for v in y)) for m, (x, y) in lines_of(ndcg).items()}
        assert drawn == expected
        assert f"Methods of {second.info.run_name}" in ui.page_text(browser)  # the view's name
        ui.close_assistant(browser)
        shot = ui.screenshot(browser, screenshots / "mlflow-view.png")
        assert shot.stat().st_size > 10_000
    finally:
        browser.quit()


MANY_BITS = (16, 32, 64)


@pytest.fixture(scope="module")
def many_methods(server) -> dict[str, Any]:
    """Every method of the catalogue and the random floor at three code lengths, one pipeline
    run's method runs logged straight through the client (no fit: made-up scores, each method's
    rising with the code length), and its saved view, in an experiment of their own."""
    import mlflow
    from mlflow.entities import Metric, RunTag

    from shdh.hashers.method_catalogue import METHODS as CATALOGUE
    from shdh.reporting import ui_view
    from shdh.tracking import mlflow_runs

    client = mlflow.MlflowClient(tracking_uri=server)
    experiment_id = client.create_experiment("shdh-many-methods")
    pipeline = "many-methods"
    parent = client.create_run(
        experiment_id,
        run_name="pipeline-many",
        tags={mlflow_runs.PIPELINE_TAG: pipeline, mlflow_runs.ROLE_TAG: "pipeline"},
    )
    methods = [m.name for m in CATALOGUE] + ["random"]
    names = ui_view.by_bits_scores(100)
    scores: dict[str, dict[str, dict[str, float]]] = {}
    for i, method in enumerate(methods):
        for j, bits in enumerate(MANY_BITS):
            run = client.create_run(
                experiment_id,
                run_name=f"{method}-{bits}",
                tags={
                    **mlflow_runs.method_tags(method, bits, 0),
                    mlflow_runs.PIPELINE_TAG: pipeline,
                    mlflow_runs.PARENT_TAG: parent.info.run_id,
                },
            )
            row = {
                name: round(0.2 + 0.03 * i + 0.01 * j + 0.001 * k, 4)
                for k, name in enumerate(names)
            }
            scores.setdefault(method, {})[str(bits)] = row
            stepped = mlflow_runs.by_bits(row, names)
            client.log_batch(
                run.info.run_id,
                metrics=[Metric(mlflow_runs.metric_key(k), v, 0, 0) for k, v in row.items()]
                + [Metric(k, v, 0, bits) for k, v in stepped.items()],
                tags=[RunTag("mlflow.runName", f"{method}-{bits}")],
            )
            client.set_terminated(run.info.run_id)
    client.set_terminated(parent.info.run_id)
    key = ui_view.view_key(pipeline)
    state = ui_view.view_state(pipeline, ui_view.charted_scores(scores))
    ui_view.save_view(client, experiment_id, key, "Methods of pipeline-many", state)
    return {"link": ui_view.view_path(experiment_id, key), "methods": methods, "scores": scores}


def test_twenty_methods_read_as_a_named_line_each_without_hovering(
    server, many_methods, browser, screenshots
):
    """With the whole catalogue at three code lengths (63 runs), each headline chart draws a
    line per method through its three code lengths, and its legend names every method."""
    methods = set(many_methods["methods"])
    assert len(methods) >= 13
    ui.open_view(browser, server, many_methods["link"])
    charts = headline_charts(browser, methods)
    for chart, score in zip(charts, ("ndcg@100", "map@1000", "mahp@2500"), strict=True):
        # One line a method through its three code lengths: every method shown.
        expected = {
            m: (MANY_BITS, tuple(many_methods["scores"][m][str(b)][score] for b in MANY_BITS))
            for m in methods
        }
        drawn = {m: (x, tuple(round(v, 4) for v in y)) for m, (x, y) in lines_of(chart).items()}
        assert drawn == expected, score
        # Read without hovering: the legend names each method once.
        named = [legend_method(e, metric_key(score)) for e in chart["legend"]]
        assert sorted(named) == sorted(methods), (score, chart["legend"])
    ui.close_assistant(browser)
    shot = ui.screenshot(browser, screenshots / "mlflow-view-many-methods.png")
    assert shot.stat().st_size > 10_000


def test_the_parents_report_shows_its_figures_in_the_artifact_viewer(
    server, tracked, browser, screenshots
):
    import mlflow

    parent = tracked["parents"][0]
    client = mlflow.MlflowClient(tracking_uri=server)
    figures = client.list_artifacts(parent.info.run_id, "figures")
    assert figures
    ui.open_view(
        browser,
        server,
        f"#/experiments/{parent.info.experiment_id}/runs/{parent.info.run_id}"
        "/artifacts/report/report.html",
    )
    images = wait_for(
        lambda: (
            (found := ui.framed_images(browser)) and all(i["complete"] for i in found) and found
        ),
        "the report's figures",
        browser,
    )
    assert len(images) == len(figures)
    assert all(i["width"] > 0 for i in images), images  # each figure decoded: it rendered
    ui.close_assistant(browser)
    assert ui.screenshot(browser, screenshots / "mlflow-report.png").stat().st_size > 10_000


def test_the_champion_is_in_the_model_registry_with_why_it_won(
    server, tracked, browser, screenshots
):
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=server)
    champion = client.get_model_version_by_alias(DEFAULT_MODEL_NAME, DEFAULT_ALIAS)
    latest = tracked["parents"][-1]
    assert champion.run_id in {
        r.info.run_id for r in tracked["children"][latest.info.run_id].values()
    }
    ui.open_view(browser, server, f"#/models/{DEFAULT_MODEL_NAME}")
    row = wait_for(
        lambda: [
            r.text
            for r in ui.by_xpath(browser, "//tr | //div[@role='row']")
            if f"Version {champion.version}" in r.text and f"@ {DEFAULT_ALIAS}" in r.text
        ],
        f"version {champion.version} with the alias @{DEFAULT_ALIAS}",
        browser,
    )[0]
    # The table shows a description's first words: the winning metric and its value.
    value = float(champion.tags[f"shdh.{DEFAULT_METRIC}"])
    assert f"{DEFAULT_METRIC} = {value:.4f}" in row, row
    assert latest.info.run_name in champion.description
    ui.close_assistant(browser)
    assert ui.screenshot(browser, screenshots / "mlflow-registry.png").stat().st_size > 10_000
