"""The project's own error types, and the check of a numeric command-line option, in a module
of their own so that the core (training, hashers, plan, the bundle's GPU side) can use them
without importing the settings loader and its YAML parser."""

from __future__ import annotations

import argparse
from collections.abc import Callable


class ConfigError(ValueError):
    """A params or profile file is missing a field or holds a value of the wrong kind."""


def whole_number(low: int, high: int | None = None) -> Callable[[str], int]:
    """An argparse type: an integer from low (to high); argparse's error names the option, where
    int() alone let a port of 99999 wrap around or a cut-off of 0 through to a deeper message."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None
        if value < low or (high is not None and value > high):
            span = f"from {low} to {high}" if high is not None else f">= {low}"
            raise argparse.ArgumentTypeError(f"expected an integer {span}, got {value}")
        return value

    return parse
