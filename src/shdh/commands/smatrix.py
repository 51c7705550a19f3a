"""shdh smatrix: the compact hierarchical similarity artifact (never N x N)."""

from __future__ import annotations

import argparse

from shdh.commands.common import add_params_argument, params_section, script_main
from shdh.steps.smatrix import smatrix as smatrix_step

HELP = "write the S-matrix artifact: ancestors, level weights, s by shared depth, a dense sample"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)


def run(args: argparse.Namespace) -> int:
    params, s = params_section(args, "smatrix")
    smatrix_step(
        params["tree"]["out_dir"],
        s["out"],
        prepared_dir=params["data"]["prepared_dir"],
        sample_size=s["sample_size"],
        seed=params["seed"],
    )
    return 0


def main(argv=None) -> int:
    return script_main(HELP, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
