"""shdh tree: extract the label tree and every item's ancestor at each level."""

from __future__ import annotations

import argparse

from shdh.commands.common import add_params_argument, params_section, script_main
from shdh.steps.tree import tree as tree_step

HELP = "build the label tree and the N x K ancestor matrix"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)


def run(args: argparse.Namespace) -> int:
    params, tree = params_section(args, "tree")
    tree_step(params["data"]["prepared_dir"], tree["out_dir"], source=tree["source"])
    return 0


def main(argv=None) -> int:
    return script_main(HELP, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
