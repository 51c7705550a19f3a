"""The check that the suite writes nothing into the checkout (tests/checkout_guard.py) fails a
session whose tests wrote there, and names the files."""

from __future__ import annotations

import os
import subprocess
import sys
import time

from tests.checkout_guard import changes, listing
from tests.conftest import REPO

CONFTEST = """
from tests.checkout_guard import pytest_configure, pytest_sessionfinish, pytest_terminal_summary
"""
WRITES_THE_CHECKOUT = """
from pathlib import Path

def test_writes_a_result():
    Path("results").mkdir(exist_ok=True)
    Path("results/metrics.json").write_text("{}")

def test_rewrites_the_lock():
    Path("dvc.lock").write_text("changed")
"""
WRITES_ITS_OWN_FOLDER = """
def test_writes_its_own_folder(tmp_path):
    (tmp_path / "metrics.json").write_text("{}")
"""


def inner_session(root, tests: str):
    (root / "pyproject.toml").write_text("[tool.pytest.ini_options]\n")
    (root / "conftest.py").write_text(CONFTEST)
    (root / "test_inner.py").write_text(tests)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:xdist", "-p", "no:randomly"],
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_a_session_that_writes_into_the_checkout_fails_and_names_the_files(tmp_path):
    (tmp_path / "dvc.lock").write_text("schema: '2.0'\n")
    done = inner_session(tmp_path, WRITES_THE_CHECKOUT + WRITES_ITS_OWN_FOLDER)
    assert done.returncode == 1, done.stdout[-2000:]
    assert "3 passed" in done.stdout  # every test passed; the session still fails
    assert "the checkout changed during the tests" in done.stdout
    assert "added: results/metrics.json" in done.stdout
    assert "rewritten: dvc.lock" in done.stdout


def test_a_session_that_writes_only_its_temporary_folders_passes(tmp_path):
    done = inner_session(tmp_path, WRITES_ITS_OWN_FOLDER)
    assert done.returncode == 0, done.stdout[-2000:]
    assert "checkout changed" not in done.stdout


def test_the_listing_skips_tool_caches_and_the_image_build(tmp_path):
    for rel in (
        "results/table.md",
        ".venv/bin/python",
        "src/pkg/__pycache__/m.cpython-311.pyc",
        "src/shdh.egg-info/PKG-INFO",
        "artifacts/wheelhouse/x.whl",
        "artifacts/images.log",
        "artifacts/models/shdh-32/model.pt",
    ):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    before = listing(tmp_path)
    assert sorted(before) == ["artifacts/models/shdh-32/model.pt", "results/table.md"]
    time.sleep(0.01)
    (tmp_path / "results/table.md").write_text("other")
    (tmp_path / "artifacts/models/shdh-32/model.pt").unlink()
    (tmp_path / "mlflow.db").write_text("")
    (tmp_path / "artifacts/wheelhouse/y.whl").write_text("")
    assert changes(before, listing(tmp_path)) == [
        "removed: artifacts/models/shdh-32/model.pt",
        "added: mlflow.db",
        "rewritten: results/table.md",
    ]
