"""shdh inputs: hash the files stages read that dvc.yaml does not list (each stage's code, a tree
JSON, a table's images, the alpha sweep), so that DVC reruns the stage that reads one when it
changes; and check your own data (data.raw_dir, its files and labels) before DVC deletes any
stage's outputs."""

from __future__ import annotations

import argparse

from shdh.commands.common import add_params_argument, load_settings, script_main
from shdh.steps.input_hashes import CODE_LIST, load_code_list, write_records

HELP = "record the hashes of each stage's code, the tree JSON, a table's images and other inputs"
DEFAULT_OUT = "artifacts/inputs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"where the records go ({DEFAULT_OUT})")
    parser.add_argument(
        "--code",
        default=CODE_LIST,
        help=f"the code each stage runs, from `make dvc-deps` ({CODE_LIST})",
    )


def run(args: argparse.Namespace) -> int:
    params = load_settings(args).params  # the settings' errors first: the commonest
    for stage, path in write_records(params, args.out, load_code_list(args.code)).items():
        print(f"{path}: inputs of stage {stage}")
    return 0


def main(argv=None) -> int:
    return script_main(HELP, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
