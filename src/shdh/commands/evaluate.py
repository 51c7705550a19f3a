"""shdh evaluate: encode, rank and score every fitted method; write metrics, codes, plots."""

from __future__ import annotations

import argparse
from pathlib import Path

from shdh.commands.common import add_params_argument, params_section, pipeline_context, script_main
from shdh.plan.all_methods import planned_fits
from shdh.reporting import parent_summary
from shdh.reporting.report import TABLE_FILE, check_outputs
from shdh.steps.score import score
from shdh.tracking import mlflow_runs

HELP = "score every fitted method: metrics.json, codes files, WR plots, results table"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument(
        "--codes-from",
        metavar="DIR",
        help="score the deep fits from DIR/codes, trained elsewhere from a bundle "
        "(shdh bundle train), instead of from their models",
    )


def run(args: argparse.Namespace) -> int:
    params, ev = params_section(args, "evaluate")
    check_outputs(ev["results_dir"], ev.get("report"))  # before tracking and ranking
    context = pipeline_context(args, params)
    parent = context["parent_run_id"]
    with mlflow_runs.failure_ends(parent):
        score(
            planned_fits(params),
            prepared_dir=params["data"]["prepared_dir"],
            smatrix_path=params["smatrix"]["out"],
            results_dir=ev["results_dir"],
            eval_params=ev,
            features_path=params["features"]["out"],
            codes_from=args.codes_from,
            **context,
        )
        view = parent_summary.summarize(parent, ev["results_dir"], ev.get("report"))
    mlflow_runs.end_parent(parent)  # the last tracked stage: the pipeline run is complete
    print((Path(ev["results_dir"]) / TABLE_FILE).read_text())
    print(f"the methods compared in the MLflow UI: {view}")
    print(f"results in {ev['results_dir']}/ (metrics.json, table.md, plots/, codes/)")
    if ev.get("report"):
        print(f"report: {ev['report']}")
    return 0


def main(argv=None) -> int:
    return script_main(HELP, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
