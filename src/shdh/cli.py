"""`shdh STEP ...`: the command line for people; each step is a module under shdh.commands."""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Sequence

from shdh import __version__
from shdh.commands import STEPS
from shdh.commands.common import setup_logging

log = logging.getLogger("shdh")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="shdh", description="Supervised Hierarchical Deep Hashing: pipeline steps and tools"
    )
    parser.add_argument("--version", action="version", version=f"shdh {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="step", required=True, metavar="STEP")
    # index: the search index; pipeline: Kubeflow; serve: the search service
    for step in (*STEPS, "index", "pipeline", "serve"):
        module = importlib.import_module(f"shdh.commands.{step}")
        p = sub.add_parser(step, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(run=module.run)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    setup_logging(args.verbose)
    try:
        return args.run(args) or 0
    except KeyboardInterrupt:
        log.error("interrupted; rerun with --resume to continue training from its checkpoint")
        return 130
    except (ValueError, OSError, RuntimeError, KeyError) as exc:
        # Bad input is reported as one clear line; a traceback helps only with -v.
        if args.verbose:
            raise
        log.error("%s", exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
