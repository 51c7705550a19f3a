"""shdh inputs: hash the files stages read that dvc.yaml does not list (each stage's code, a tree
JSON, a table's images, the alpha sweep), so that DVC reruns the stage that reads one when it
changes; and check your own data (data.raw_dir, its files and labels) before DVC deletes any
stage's outputs."""

from __future__ import annotations

import argparse
from pathlib import Path

from shdh.commands.common import add_params_argument, load_settings, script_main
from shdh.steps.input_hashes import CODE_LIST, load_code_list, write_records

HELP = "record the hashes of each stage's code, the tree JSON, a table's images and other inputs"
DEFAULT_OUT = "artifacts/inputs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"where the records go ({DEFAULT_OUT})")
    parser.add_argument(
        "--code",
        help=f"the code each stage runs, from `make dvc-deps`, as dvc.yaml gives it; without "
        f"it, {CODE_LIST} where there is one (outside a checkout there is none: no code records)",
    )


def run(args: argparse.Namespace) -> int:
    params = load_settings(args).params  # the settings' errors first: the commonest
    code_list = args.code or (CODE_LIST if Path(CODE_LIST).is_file() else None)
    code = load_code_list(code_list) if code_list else {}
    for stage, path in write_records(params, args.out, code).items():
        print(f"{path}: inputs of stage {stage}")
    return 0


def main(argv=None) -> int:
    return script_main(HELP, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
