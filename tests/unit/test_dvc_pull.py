"""A data version that cannot be pulled fails the prepare step, unless data.download_fallback
lets the public download take over. The remotes are real DVC local remotes (folders): one that
does not exist and one that is empty; DVC itself runs unmocked."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from shdh.steps.dvc_pull import DataVersionError, pull_or_fetch
from shdh.tracking.mlflow_runs import dvc_dir_md5
from tests.components.test_components import gzip_mirror
from tests.conftest import write_fashion_mnist_raw


@pytest.fixture
def mirror(tmp_path) -> dict:
    """The raw files at a public mirror, and their DVC hash (the version data.dvc records)."""
    raw = write_fashion_mnist_raw(tmp_path / "raw" / "data" / "fashion-mnist")
    return {"url": gzip_mirror(raw, tmp_path / "mirror"), "md5": dvc_dir_md5(raw.parent)}


def version(md5: str, remote: Path) -> str:
    """What the pipeline compiler gives the step: data.dvc and a .dvc/config naming remote."""
    dvc_file = f"outs:\n- md5: {md5}\n  hash: md5\n  path: data\n"
    config = f"[core]\n    remote = store\n['remote \"store\"']\n    url = {remote}\n"
    return json.dumps({"dvc_file": dvc_file, "dvc_config": config})


def data(mirror: dict, **settings) -> dict:
    return {
        "dataset": "fashion-mnist-h",
        "raw_dir": "data/fashion-mnist",
        "sources": [str(mirror["url"])],
        "verify": False,
        **settings,
    }


def test_a_pull_from_a_missing_remote_fails_naming_it_dvcs_text_and_the_setting(mirror, tmp_path):
    remote = tmp_path / "no-such-remote"
    work = tmp_path / "work"
    with pytest.raises(DataVersionError) as err:
        pull_or_fetch(version(mirror["md5"], remote), work, data(mirror))
    text = str(err.value)
    assert f"data version {mirror['md5']} (data.dvc) is not in the DVC remote 'store' " in text
    assert f"'store' ({remote}); push it" in text
    assert "DVC said: Some of the cache files do not exist neither locally nor on remote" in text
    assert "`dvc push data.dvc`" in text
    assert text.endswith("set data.download_fallback: true (params.yaml)")
    assert not (work / "data" / "fashion-mnist").exists()  # the mirror was not used


def test_with_download_fallback_a_failed_pull_downloads_and_warns_what_failed(
    mirror, tmp_path, caplog
):
    remote = tmp_path / "empty-remote"
    remote.mkdir()
    with caplog.at_level(logging.INFO, logger="shdh.steps.dvc_pull"):
        raw = pull_or_fetch(
            version(mirror["md5"], remote), tmp_path / "work", data(mirror, download_fallback=True)
        )
    warnings = [
        r.getMessage()
        for r in caplog.records
        if r.name == "shdh.steps.dvc_pull" and r.levelno == logging.WARNING
    ]
    assert len(warnings) == 1, warnings
    assert (
        f"data version {mirror['md5']} (data.dvc) is not in the DVC remote 'store' "
        in (warnings[0])
    )
    assert f"'store' ({remote}); push it" in warnings[0]
    assert "DVC said: Some of the cache files do not exist" in warnings[0]
    assert "data.download_fallback is true, so falling back to the public download" in (warnings[0])
    assert (raw.source, raw.md5) == ("download", mirror["md5"])
    assert sorted(p.name for p in raw.path.iterdir()) == sorted(
        p.name.removesuffix(".gz") for p in mirror["url"].iterdir()
    )
