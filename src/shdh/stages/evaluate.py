"""shdh evaluate: encode, rank and score every trained model; write metrics, codes, plots."""

from __future__ import annotations

import argparse
from pathlib import Path

from shdh import steps
from shdh.stages.common import add_params_argument, params_section, run_tags, script_main

HELP = "score every trained model: metrics.json, codes files, WR plots, results table"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)


def run(args: argparse.Namespace) -> int:
    params, ev = params_section(args, "evaluate")
    train = params["train"]
    steps.evaluate(
        prepared_dir=params["data"]["prepared_dir"],
        smatrix_path=params["smatrix"]["out"],
        models_dir=train["models_dir"],
        results_dir=ev["results_dir"],
        methods=train["methods"],
        bits=train["bits"],
        eval_params=ev,
        seed=params["seed"],
        device=train["device"],
        tags=run_tags(params),
    )
    print((Path(ev["results_dir"]) / "table.md").read_text())
    return 0


def main(argv=None) -> int:
    return script_main(HELP, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
