"""A fresh copy of the repository, as a user gets it by cloning, for the `dvc repro` tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO


def sh(cmd: list[str], cwd: Path, env: dict[str, str], ok: bool = True) -> str:
    """Run a command; with ok, it must succeed (its output is shown otherwise). Returns stdout,
    or stdout and stderr together when it may fail."""
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
    if ok:
        assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}"
        return proc.stdout
    assert proc.returncode != 0, f"{' '.join(cmd)} should have failed:\n{proc.stdout}"
    return proc.stdout + proc.stderr


def clone_repo(dest: Path) -> dict[str, str]:
    """Copy the tracked and new files (nothing ignored) to dest, commit them in a new git
    repository, and return the environment to run `shdh` and `dvc` there (MLflow in dest)."""
    files = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    for name in filter(None, files):
        src = REPO / name
        if src.is_file():
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / name)
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "MLFLOW_TRACKING_URI": f"sqlite:///{dest / 'mlflow.db'}",
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    sh(["git", "init", "-q"], dest, env)
    sh(["git", "add", "-A"], dest, env)
    sh(["git", "commit", "-q", "-m", "clone"], dest, env)
    return env
