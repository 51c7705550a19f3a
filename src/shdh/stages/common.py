"""What every step command shares: the --params flag and running a step as a script."""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Sequence
from typing import Any

from shdh.config import load_params, section


def add_params_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--params", default="params.yaml", help="settings file (default: params.yaml)"
    )


def params_section(args: argparse.Namespace, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The whole params file and one of its sections."""
    params = load_params(args.params)
    return params, section(params, name, args.params)


def run_tags(params: dict[str, Any]) -> dict[str, str]:
    """MLflow tags that let runs be filtered by dataset and profile in the UI."""
    data = params.get("data", {})
    return {"dataset": str(data.get("dataset", "")), "profile": str(params.get("profile", ""))}


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def script_main(
    description: str, add_arguments: Callable, run: Callable, argv: Sequence[str] | None = None
) -> int:
    parser = argparse.ArgumentParser(description=description)
    add_arguments(parser)
    args = parser.parse_args(argv)
    setup_logging()
    return run(args) or 0
