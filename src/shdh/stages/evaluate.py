"""shdh evaluate: encode, rank and score every fitted method; write metrics, codes, plots."""

from __future__ import annotations

import argparse
from pathlib import Path

from shdh import evaluation, parent_run
from shdh.plan import planned_runs
from shdh.stages.common import add_params_argument, params_section, pipeline_context, script_main

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
    evaluation.check_outputs(ev["results_dir"], ev.get("report"))  # before tracking and ranking
    context = pipeline_context(args, params)
    parent = context["parent_run_id"]
    with parent_run.failure_ends(parent):
        evaluation.evaluate(
            prepared_dir=params["data"]["prepared_dir"], smatrix_path=params["smatrix"]["out"],
            models_dir=params["train"]["models_dir"], results_dir=ev["results_dir"],
            shallow_models_dir=params["baselines"]["models_dir"],
            runs=planned_runs(params), eval_params=ev, features_path=params["features"]["out"],
            seed=params["seed"], codes_from=args.codes_from, **context,
        )  # fmt: skip
        parent_run.summarize(parent, ev["results_dir"], ev.get("report"))
    parent_run.end_parent(parent)  # the last tracked stage: the pipeline run is complete
    print((Path(ev["results_dir"]) / "table.md").read_text())
    print(f"results in {ev['results_dir']}/ (metrics.json, table.md, plots/, codes/)")
    if ev.get("report"):
        print(f"report: {ev['report']}")
    return 0


def main(argv=None) -> int:
    return script_main(HELP, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
