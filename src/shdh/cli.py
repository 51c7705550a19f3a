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

# index: the search index; pipeline: Kubeflow; serve: the search service
COMMANDS = (*STEPS, "index", "pipeline", "serve")


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line, or with `only` the one command's: each command module imports
    what its step needs (torch alone takes seconds), so a process that runs one step, as every
    DVC stage does, imports only that step's module."""
    parser = argparse.ArgumentParser(
        prog="shdh", description="Supervised Hierarchical Deep Hashing: pipeline steps and tools"
    )
    parser.add_argument("--version", action="version", version=f"shdh {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    sub = parser.add_subparsers(dest="step", required=True, metavar="STEP")
    for step in COMMANDS if only is None else (only,):
        module = importlib.import_module(f"shdh.commands.{step}")
        p = sub.add_parser(step, help=module.HELP, description=module.HELP)
        module.add_arguments(p)
        p.set_defaults(run=module.run)
    return parser


def _named_command(argv: Sequence[str]) -> str | None:
    """The command the arguments name, when it is a known one; None for help, no command or a
    misspelt one, which the whole parser answers (its listing, its suggestions)."""
    step = next((arg for arg in argv if not arg.startswith("-")), None)
    return step if step in COMMANDS else None


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    args = build_parser(_named_command(argv)).parse_args(argv)
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
