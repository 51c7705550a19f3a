"""What every benchmark prints: the machine and commit lines (figures mean nothing without them)
and its rows against an upper-bound target."""

from __future__ import annotations

import datetime
import os
import platform
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def machine_line() -> str:
    """Where and with what the figures were measured, and how busy the machine was."""
    import numpy as np

    return (
        f"{platform.platform()}, {platform.machine()}, {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.2f}; Python {platform.python_version()}, "
        f"numpy {np.__version__}, torch {_version('torch')}, faiss-cpu {_version('faiss-cpu')}"
    )


def _version(package: str) -> str:
    """An installed package's version, or "not installed": a bare GPU machine has torch and
    numpy but not faiss, and the figures measured there still need their machine line."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return "not installed"


def commit_line() -> str:
    """HEAD and whether the library differs from it (uncommitted changes are measured too)."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True).stdout

    dirty = " (src/ has uncommitted changes)" if git("status", "--porcelain", "src").strip() else ""
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return f"commit {git('rev-parse', '--short', 'HEAD').strip()}{dirty}; {now}"


def at_most_row(what: str, value: float, target: float, unit: str) -> str:
    """A markdown row for a figure with an upper bound: value, bound, share of it, PASS/FAIL."""
    verdict = "PASS" if value <= target else "FAIL"
    return (
        f"| {what} | {value:.2f} {unit} | <= {target:g} {unit} | {value / target:.2f} | {verdict} |"
    )
