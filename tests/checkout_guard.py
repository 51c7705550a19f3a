"""The test suite leaves the checkout as it found it: a pytest plugin (loaded by tests/conftest.py)
that lists the files under the session's root folder (the repository, where pyproject.toml is)
when the session starts, and fails the session when any of them was added, removed or rewritten
by the time it ends.

A user runs `make run`, then `make test`, then serves or reports on what the run made; a test
that wrote into artifacts/, results/, docs/, dvc.lock or the MLflow store of the checkout would
quietly replace the user's outputs with a test's. Every test writes under its own temporary
folder instead, and this check names the files of one that does not.

What the suite's own tooling writes is left out: the virtualenv, bytecode and tool caches, and
the image build that CI runs beside the tests (`make images`: its wheelhouse and its log).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Folder names skipped wherever they are: not outputs of the code under test.
SKIPPED_NAMES = frozenset(
    {".git", ".venv", "__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache"}
)
# Paths, relative to the repository, that `make images` writes while `make test` runs in CI.
SKIPPED_PATHS = frozenset({"artifacts/wheelhouse", "artifacts/images.log"})
# A reference a test rewrites only when asked (SMOKE_REFERENCE=write, after a change that moves
# the numbers on purpose): then its rewrite is the point, not a leak.
WRITTEN_ON_REQUEST = {"tests/e2e/smoke_metrics.json": "SMOKE_REFERENCE"}
_BEFORE = pytest.StashKey[dict]()
_FOUND = pytest.StashKey[list]()

Listing = dict[str, tuple[int, int]]


def listing(root: Path) -> Listing:
    """{path relative to root: (size, modification time in ns)} of every file the check
    watches; links are listed as themselves, never followed."""
    found: Listing = {}
    for folder, dirs, files in os.walk(root):
        rel_folder = Path(folder).relative_to(root)
        dirs[:] = [
            d
            for d in dirs
            if d not in SKIPPED_NAMES
            and not d.endswith(".egg-info")
            and (rel_folder / d).as_posix() not in SKIPPED_PATHS
        ]
        for name in files:
            rel = (rel_folder / name).as_posix()
            if rel in SKIPPED_PATHS or name.endswith(".pyc"):
                continue
            stat = os.lstat(Path(folder) / name)
            found[rel] = (stat.st_size, stat.st_mtime_ns)
    return found


def changes(before: Listing, after: Listing) -> list[str]:
    """One line per file that differs, sorted: added, removed or rewritten."""
    lines = [f"added: {p}" for p in after.keys() - before.keys()]
    lines += [f"removed: {p}" for p in before.keys() - after.keys()]
    lines += [f"rewritten: {p}" for p in before.keys() & after.keys() if before[p] != after[p]]
    return sorted(lines, key=lambda line: line.split(": ", 1)[1])


def _requested(line: str) -> bool:
    """A change of a reference that its variable asked a test to write."""
    variable = WRITTEN_ON_REQUEST.get(line.split(": ", 1)[1])
    return variable is not None and os.environ.get(variable) == "write"


def _is_worker(config: pytest.Config) -> bool:
    """An xdist worker: the controller alone watches, from before the first test to after the
    last."""
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    if not _is_worker(config):
        config.stash[_BEFORE] = listing(config.rootpath)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if _BEFORE not in config.stash:  # a worker, or a session that stopped before configuring
        return
    found = changes(config.stash[_BEFORE], listing(config.rootpath))
    found = config.stash[_FOUND] = [line for line in found if not _requested(line)]
    if found and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    found = config.stash.get(_FOUND, [])
    if not found:
        return
    terminalreporter.section("the checkout changed during the tests", red=True, bold=True)
    terminalreporter.line(
        f"{len(found)} file(s) of the repository were written by the tests (each test must "
        "write under its own temporary folder; tests/checkout_guard.py):"
    )
    for line in found[:50]:
        terminalreporter.line(f"  {line}")
    if len(found) > 50:
        terminalreporter.line(f"  ... and {len(found) - 50} more")
