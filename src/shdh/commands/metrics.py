"""shdh metrics: score any codes file (see docs/codes-format.md), whatever tool made it."""

from __future__ import annotations

import argparse
import json

from shdh.commands.common import script_main
from shdh.core.codes_file import evaluate_codes_file
from shdh.runtime.errors import whole_number

HELP = "evaluate a codes .npz file and print ACG, DCG, NDCG, WR and the peers' mAP and mAHP as JSON"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("codes", help="codes file (.npz, the shdh codes-file contract)")
    parser.add_argument(
        "--n", type=whole_number(1), default=100, help="cut-off n of ACG/DCG/NDCG@n"
    )


def run(args: argparse.Namespace) -> int:
    print(json.dumps(evaluate_codes_file(args.codes, n=args.n), indent=2))
    return 0


def main(argv=None) -> int:
    return script_main(HELP, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
