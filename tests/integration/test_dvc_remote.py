"""A DVC S3 remote on the SeaweedFS bucket: `dvc push`, lose cache and data, `dvc pull`.

This is how the team shares the raw data: the remote's URL and endpoint are committed in
.dvc/config, the credentials live in .dvc/config.local (git-ignored), and DVC gets no AWS
variables from the environment, so a pull that works proves the local config was used.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import write_fashion_mnist_raw

pytestmark = pytest.mark.integration

DVC = str(Path(sys.executable).parent / "dvc")
REMOTE_PREFIX = "dvcstore"


def run(cmd: list[str], cwd: Path, env: dict[str, str]) -> str:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def digests(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.md5(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


@pytest.fixture
def project(tmp_path, s3_server) -> tuple[Path, dict[str, str]]:
    """A tiny git + DVC project whose data/ folder is tracked by `dvc add`."""
    root = tmp_path / "project"
    root.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        {
            **s3_server.isolation_env(),
            "DVC_NO_ANALYTICS": "1",
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@example.invalid",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@example.invalid",
        }
    )
    write_fashion_mnist_raw(root / "data" / "raw", n_train=40, n_test=20)
    (root / "data" / "README.txt").write_text("tiny Fashion-MNIST-shaped set\n")
    run(["git", "init", "-q"], root, env)
    run([DVC, "init", "-q"], root, env)
    run([DVC, "add", "-q", "data"], root, env)
    run(["git", "add", "-A"], root, env)
    run(["git", "commit", "-q", "-m", "data under dvc"], root, env)
    return root, env


def test_push_then_pull_from_an_s3_remote_restores_identical_files(project, s3_server):
    root, env = project
    url = f"s3://{s3_server.bucket}/{REMOTE_PREFIX}"
    run([DVC, "remote", "add", "-d", "storage", url], root, env)
    run([DVC, "remote", "modify", "storage", "endpointurl", s3_server.endpoint], root, env)
    run([DVC, "remote", "modify", "storage", "region", s3_server.region], root, env)
    for option, value in (
        ("access_key_id", s3_server.access_key),
        ("secret_access_key", s3_server.secret_key),
    ):
        run([DVC, "remote", "modify", "--local", "storage", option, value], root, env)
    assert s3_server.secret_key not in (root / ".dvc" / "config").read_text()
    assert s3_server.secret_key in (root / ".dvc" / "config.local").read_text()
    run(["git", "check-ignore", "-q", ".dvc/config.local"], root, env)  # never committed

    before = digests(root / "data")
    assert len(before) == 5
    run([DVC, "push"], root, env)
    listing = s3_server.client().list_objects_v2(
        Bucket=s3_server.bucket, Prefix=f"{REMOTE_PREFIX}/files/md5/"
    )
    assert listing["KeyCount"] == len(before) + 1  # each file, and the folder's .dir listing

    shutil.rmtree(root / "data")
    shutil.rmtree(root / ".dvc" / "cache")
    run([DVC, "pull"], root, env)
    assert digests(root / "data") == before
    status = run([DVC, "status", "--cloud"], root, env)
    assert "in sync" in status
