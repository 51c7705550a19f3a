"""shdh report: redraw the figures and rewrite docs/results.md's tables from the last evaluation."""

from __future__ import annotations

import argparse
from pathlib import Path

from shdh.commands.common import add_params_argument, params_section, script_main
from shdh.reporting.report import report_from_results
from shdh.settings.locations import check_results_location

HELP = "figures (paper Fig. 3 and 4) and docs/results.md tables from the last evaluate step"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument(
        "--report", default=None, help="the document to write (default: evaluate.report)"
    )


def run(args: argparse.Namespace) -> int:
    params, ev = params_section(args, "evaluate")
    report = args.report or ev.get("report")
    if not report:
        raise ValueError("params.yaml: evaluate.report is not set and no --report was given")
    check_results_location(params, args.params, report=report)
    figures = report_from_results(ev["results_dir"], report, ev.get("alpha_sweep"))
    for figure in figures:
        print(f"{figure.path}  {figure.caption}")
    print(f"{Path(report)}: tables and figures updated")
    return 0


def main(argv=None) -> int:
    return script_main(HELP, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
