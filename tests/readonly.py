"""Read-only folders in tests, also when the tests run as root.

root ignores permission bits (the capability CAP_DAC_OVERRIDE), so a folder made read-only with
chmod is read-only to root only in a process started without that capability: `setpriv`
(util-linux) starts one. Without root nothing needs dropping.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

_CAPS = "-dac_override,-dac_read_search"


def run_without_override(args: list[str], **kwargs) -> subprocess.CompletedProcess:
    """Run `python ARGS...` so that permission bits apply to it, whoever runs the tests."""
    cmd = [sys.executable, *args]
    if os.geteuid() == 0:
        setpriv = shutil.which("setpriv")
        if setpriv is None:
            pytest.fail("running as root: the read-only folder tests need setpriv (util-linux)")
        cmd = [setpriv, f"--bounding-set={_CAPS}", f"--inh-caps={_CAPS}", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kwargs)


def read_only(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    folder.chmod(0o555)
    return folder
