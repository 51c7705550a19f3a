"""shdh features: 512-D GIST of every item, for the shallow baselines."""

from __future__ import annotations

import argparse

from shdh.commands.common import add_params_argument, params_section, script_main
from shdh.steps.features import features as gist_step

HELP = "compute 512-D GIST features (Oliva & Torralba) of every item"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)


def run(args: argparse.Namespace) -> int:
    params, features = params_section(args, "features")
    gist_step(params["data"]["prepared_dir"], features["out"], batch_size=features["batch_size"])
    return 0


def main(argv=None) -> int:
    return script_main(HELP, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
