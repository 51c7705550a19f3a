"""shdh prepare: the raw files -> the project's dataset format and the seeded split."""

from __future__ import annotations

import argparse

from shdh.commands.common import add_params_argument, params_section, script_main
from shdh.steps.prepare import prepare, prepare_options

HELP = "convert the raw files to the dataset format and make the query/database split"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument(
        "--skip-bad-images",
        action="store_true",
        help="leave out (count and log) images that cannot be decoded instead of failing "
        "(default: data.skip_bad_images)",
    )


def run(args: argparse.Namespace) -> int:
    params, data = params_section(args, "data")
    options = prepare_options(data)
    options["skip_bad_images"] = args.skip_bad_images or options["skip_bad_images"]
    prepare(data["raw_dir"], data["prepared_dir"], seed=params["seed"], **options)
    return 0


def main(argv=None) -> int:
    return script_main(HELP, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
