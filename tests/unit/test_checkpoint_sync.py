"""The checkpoint store's settings and its uploader, with an in-memory client standing in for
S3 (tests/integration/test_checkpoint_sync.py runs it against a real server)."""

from __future__ import annotations

import logging
import os
import threading

import pytest

from shdh.tracking.checkpoint_sync import STORE_ENV, CheckpointStoreError, FitCheckpoints, from_env


class TrainingFiles:
    """What the uploader reads off a hasher: the names of its training files."""

    training_files = ("checkpoint.pt", "hasher.json")


class RecordingClient:
    """Keeps what was uploaded; optionally holds each upload until `release` is set."""

    def __init__(self, fail: bool = False) -> None:
        self.objects: dict[str, bytes] = {}
        self.release = threading.Event()
        self.release.set()
        self.fail = fail

    def upload_fileobj(self, handle, bucket, key, extra):
        self.release.wait(10)
        if self.fail:
            raise OSError("connection reset by peer")
        self.objects[f"{bucket}/{key}"] = handle.read()


def write_epoch(out_dir, epoch: int) -> None:
    """A checkpoint replaced the way the training loop replaces it: a new file renamed over."""
    work = out_dir / "work"
    work.mkdir(parents=True, exist_ok=True)
    tmp = work / ".checkpoint.tmp"
    tmp.write_bytes(f"weights of epoch {epoch}".encode())
    os.replace(tmp, work / "checkpoint.pt")
    (work / "hasher.json").write_text('{"method": "shdh"}')


def test_the_store_is_off_unless_its_variable_is_set(monkeypatch):
    monkeypatch.delenv(STORE_ENV, raising=False)
    assert from_env("run-1", "shdh-16-seed0") is None
    monkeypatch.setenv(STORE_ENV, "s3://shdh/checkpoints/")
    store = from_env("run-1", "shdh-16-seed0")
    assert store.url == "s3://shdh/checkpoints/run-1/shdh-16-seed0"
    assert (store.bucket, store.prefix) == ("shdh", "checkpoints/run-1/shdh-16-seed0")
    monkeypatch.setenv(STORE_ENV, "s3://shdh")  # a bucket of its own
    assert from_env("run-1", "shdh-16-seed0").prefix == "run-1/shdh-16-seed0"


@pytest.mark.parametrize("url", ["checkpoints", "s3:///checkpoints", "https://host/x/y"])
def test_a_url_that_is_not_s3_bucket_prefix_is_refused_naming_the_variable(url, monkeypatch):
    monkeypatch.setenv(STORE_ENV, url)
    with pytest.raises(
        CheckpointStoreError, match=rf"{STORE_ENV}: expected s3://bucket\[/prefix\]"
    ):
        from_env("run-1", "shdh-16-seed0")
    with pytest.raises(CheckpointStoreError, match="expected s3://bucket/key"):
        FitCheckpoints(url)


def test_an_upload_sends_its_epochs_bytes_though_the_next_epoch_replaced_the_file(tmp_path):
    client = RecordingClient()
    store = FitCheckpoints("s3://b/ck/run/fit", client=client)
    seen = []
    client.release.clear()  # the upload of epoch 1 waits until epoch 2 replaced the file
    with store.syncing(TrainingFiles(), tmp_path, seen.append) as on_epoch:
        write_epoch(tmp_path, 1)
        on_epoch({"epoch": 1})
        write_epoch(tmp_path, 2)
        client.release.set()
    assert client.objects["b/ck/run/fit/checkpoint.pt"] == b"weights of epoch 1"
    assert seen == [{"epoch": 1}]


def test_a_failed_upload_is_logged_and_the_fit_goes_on(tmp_path, caplog):
    store = FitCheckpoints("s3://b/ck/run/fit", client=RecordingClient(fail=True))
    seen = []
    with (
        caplog.at_level(logging.WARNING),
        store.syncing(TrainingFiles(), tmp_path, seen.append) as on_epoch,
    ):
        for epoch in (1, 2):
            write_epoch(tmp_path, epoch)
            on_epoch({"epoch": epoch})
    assert [e["epoch"] for e in seen] == [1, 2]
    failures = [r.getMessage() for r in caplog.records if "upload failed" in r.getMessage()]
    assert len(failures) == 2 and "connection reset by peer" in failures[0]
