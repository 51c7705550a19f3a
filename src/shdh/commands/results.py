"""shdh results: print the results table of the last evaluate step."""

from __future__ import annotations

import argparse
from pathlib import Path

from shdh.commands.common import add_params_argument, params_section, script_main
from shdh.reporting.report import METRICS_FILE, read_metrics, results_table

HELP = "print the results table (from evaluate.results_dir/metrics.json)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)


def run(args: argparse.Namespace) -> int:
    _, ev = params_section(args, "evaluate")
    path = Path(ev["results_dir"]) / METRICS_FILE
    if not path.is_file():
        raise SystemExit(f"{path}: no results yet; run `dvc repro` first")
    print(results_table(read_metrics(ev["results_dir"]), ev["n"]))
    return 0


def main(argv=None) -> int:
    return script_main(HELP, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
