"""A fresh copy of the repository, as a user gets it by cloning, for the `dvc repro` tests."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from shdh.cli import main
from tests.conftest import REPO


def sh(cmd: list[str], cwd: Path, env: dict[str, str], ok: bool = True) -> str:
    """Run a command; with ok, it must succeed (its output is shown otherwise). Returns stdout,
    or stdout and stderr together when it may fail.

    The output goes to files, not pipes: `dvc exp run --run-all` leaves DVC's queue workers
    running in the background with its output open, and reading a pipe would wait for them
    rather than for the command."""
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        proc = subprocess.run(cmd, cwd=cwd, env=env, stdout=out, stderr=err, timeout=600)
        out.seek(0)
        err.seek(0)
        stdout, stderr = out.read(), err.read()
    if ok:
        assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{stdout}\n{stderr}"
        return stdout
    assert proc.returncode != 0, f"{' '.join(cmd)} should have failed:\n{stdout}"
    return stdout + stderr


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


def record_inputs(checkout: Path) -> None:
    """What `dvc repro` runs first (`shdh inputs`, its records of the files dvc.yaml does not
    list), in this process: a `shdh` process spends seconds importing torch before it hashes a
    file."""
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(checkout)
        assert main(["inputs", "--out", "artifacts/inputs", "--code", "stage-code.json"]) == 0
