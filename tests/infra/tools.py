"""The command-line tools the infrastructure tests run, found the same way everywhere.

A missing tool fails the test that needs it, with what to install: these tools are test
dependencies, and a skipped check would look like a passed one.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import pytest


def find_tool(name: str, install_hint: str) -> str:
    """`name` beside this Python first (pip installs into the venv's bin), then on the PATH."""
    beside = Path(sys.executable).parent / name
    if beside.is_file():
        return str(beside)
    found = shutil.which(name)
    if found is None:
        pytest.fail(f"no `{name}` beside {sys.executable} or on the PATH: {install_hint}")
    return found
