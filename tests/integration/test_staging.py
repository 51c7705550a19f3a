"""A TrainJob's inputs staged in a real S3 server (SeaweedFS) by their content: uploaded by the
first fit that needs them, found whole by every other, fetched by the nodes file for file."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path

import numpy as np
import pytest

from shdh.data.dataset import Dataset, save_dataset
from shdh.tracking import staging
from shdh.tracking.checkpoint_sync import CheckpointStoreError, StoreFolder

pytestmark = pytest.mark.integration


@pytest.fixture
def store(s3_env, monkeypatch) -> str:
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3_env.endpoint)
    return f"s3://{s3_env.bucket}/staging-{uuid.uuid4().hex[:8]}"


@pytest.fixture(autouse=True)
def quick_leases(monkeypatch):
    """The lease's waits at a test's pace (the protocol is the same)."""
    monkeypatch.setattr(staging, "SETTLE_S", 0.3)
    monkeypatch.setattr(staging, "POLL_S", 0.2)


def recorded(monkeypatch, method: str) -> list[str]:
    """The names StoreFolder.`method` (put_file or download) is called with from now on, by any
    thread: the files it uploads or downloads."""
    names: list[str] = []
    original = getattr(StoreFolder, method)
    at = 1 if method == "download" else 2  # download(self, name, dest); put_file(self, path, name)

    def counted(*args):
        names.append(args[at])
        return original(*args)

    monkeypatch.setattr(StoreFolder, method, counted)
    return names


@pytest.fixture
def uploads(monkeypatch) -> list[str]:
    """The names of the files uploaded from now on (by any thread)."""
    return recorded(monkeypatch, "put_file")


def prepared(tmp_path: Path, seed: int = 0) -> Path:
    """A prepared folder as `prepare` writes one: a sharded dataset (meta.json records each
    shard's SHA-256) and the split beside it."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (40, 16, 16, 3), dtype=np.uint8)
    labels = np.array([f"a/b{i % 4}" for i in range(40)])
    folder = tmp_path / f"prepared-{seed}"
    ds = Dataset(images, labels, np.arange(40, dtype=np.int64), "photos")
    save_dataset(ds, folder / "dataset", shard_mb=0.01)  # several shards of a dozen rows
    (folder / "split.npz").write_bytes(rng.bytes(64))
    return folder


def files_of(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes() for p in folder.rglob("*") if p.is_file()
    }


def test_an_input_is_uploaded_once_and_fetched_file_for_file(store, uploads, tmp_path, monkeypatch):
    local = prepared(tmp_path)
    hashed = []
    monkeypatch.setattr(staging, "sha256sum", lambda path: hashed.append(path.name) or "0" * 64)
    assert len(list((local / "dataset" / "images").iterdir())) > 1
    first = staging.stage(store, local, "prepared")
    # The shards' digests come from meta.json: staging a million photos does not read them.
    assert sorted(hashed) == ["ids.npy", "labels.npy", "meta.json", "split.npz"]
    assert sorted(uploads) == sorted(f"files/{name}" for name in files_of(local))
    again = staging.stage(store, local, "prepared")  # the next fit of the run
    assert again == first and len(uploads) == len(files_of(local))
    assert first["url"].startswith(f"{store}/inputs/prepared-") and first["file"] == ""
    fetched = staging.fetch(first, tmp_path / "node" / "prepared")
    assert files_of(fetched) == files_of(local)


def test_other_content_is_staged_apart_and_a_single_file_keeps_its_name(store, tmp_path):
    a, b = prepared(tmp_path, 0), prepared(tmp_path, 1)
    assert staging.content_digest(a) != staging.content_digest(b)
    assert staging.stage(store, a, "prepared") != staging.stage(store, b, "prepared")
    smatrix = tmp_path / "similarity" / "smatrix.npz"
    smatrix.parent.mkdir()
    smatrix.write_bytes(b"compact S")
    staged = staging.stage(store, smatrix, "similarity")
    assert staged["file"] == "smatrix.npz"
    assert staging.fetch(staged, tmp_path / "node").read_bytes() == b"compact S"


def test_a_half_staged_input_is_uploaded_again(store, uploads, tmp_path):
    """A launch killed during its upload left files but no complete.json: the next launch does
    not trust them, and uploads the whole input before marking it complete."""
    local = prepared(tmp_path)
    digest = staging.content_digest(local)[: staging.DIGEST_CHARS]
    folder = StoreFolder(f"{store}/{staging.INPUTS_DIR}/prepared-{digest}")
    folder.put_file(local / "split.npz", "files/split.npz")
    uploads.clear()
    staging.stage(store, local, "prepared")
    assert len(uploads) == len(files_of(local))
    assert folder.head(staging.COMPLETE) is not None


def test_a_staged_input_missing_a_file_is_uploaded_again(store, uploads, tmp_path):
    """complete.json outlived a file (a lifecycle rule expires the older objects first): the
    marker is not enough, every file must be there."""
    local = prepared(tmp_path)
    staged = staging.stage(store, local, "prepared")
    folder_url, _ = staged["url"].rsplit("/", 1)
    folder = StoreFolder(folder_url)
    folder.client.delete_object(Bucket=folder.bucket, Key=f"{folder.prefix}/files/split.npz")
    uploads.clear()
    staging.stage(store, local, "prepared")
    assert len(uploads) == len(files_of(local))
    assert files_of(staging.fetch(staged, tmp_path / "node")) == files_of(local)


def test_launches_at_once_upload_an_input_once(store, uploads, tmp_path, monkeypatch):
    """The fits of a DAG launch side by side: one of them uploads, the others wait for it. (Two
    would both upload only if one wrote its claim more than SETTLE_S after it found none: a
    waste, not an error; 1 s here keeps a busy test machine's scheduling out of it.)"""
    monkeypatch.setattr(staging, "SETTLE_S", 1.0)
    local = prepared(tmp_path)
    start = threading.Barrier(3)
    staged: list[dict] = []

    def launch():
        start.wait()
        staged.append(staging.stage(store, local, "prepared"))

    threads = [threading.Thread(target=launch) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert len(staged) == 3 and staged[0] == staged[1] == staged[2]
    assert sorted(uploads) == sorted(f"files/{name}" for name in files_of(local))
    assert files_of(staging.fetch(staged[0], tmp_path / "node")) == files_of(local)


def test_a_dead_launchs_claim_is_taken_over_once_stale(store, uploads, tmp_path, monkeypatch):
    local = prepared(tmp_path)
    digest = staging.content_digest(local)[: staging.DIGEST_CHARS]
    folder = StoreFolder(f"{store}/{staging.INPUTS_DIR}/prepared-{digest}")
    staging.Lease(folder, owner="a launch that was killed")._write()
    monkeypatch.setattr(staging, "LEASE_STALE_S", 2.0)
    started = time.monotonic()
    staging.stage(store, local, "prepared")
    assert time.monotonic() - started >= 1.0  # it waited for the claim to go stale
    assert len(uploads) == len(files_of(local))
    assert folder.head(staging.LEASE) is None  # released once complete


def test_a_waiting_launch_takes_the_input_another_staged(store, uploads, tmp_path):
    """A live claim (refreshed) is left alone: the waiting launch uploads nothing and returns
    once the holder's complete.json is there."""
    local = prepared(tmp_path)
    digest = staging.content_digest(local)[: staging.DIGEST_CHARS]
    folder = StoreFolder(f"{store}/{staging.INPUTS_DIR}/prepared-{digest}")
    holder = staging.Lease(folder, owner="the launch that uploads")
    holder._write()
    waiting: list[dict] = []
    thread = threading.Thread(
        target=lambda: waiting.append(staging.stage(store, local, "prepared"))
    )
    thread.start()
    time.sleep(1.0)
    assert not waiting and not uploads  # it waits, and does not upload
    staging.put_tree(folder, local, staging.FILES)
    folder.put_bytes(b"{}", staging.COMPLETE)
    holder.release()
    thread.join(timeout=60)
    assert waiting and waiting[0]["url"] == f"{folder.url}/{staging.FILES}"
    assert len(uploads) == len(files_of(local))  # the holder's own files only


def test_a_nodes_processes_share_one_download(store, tmp_path, monkeypatch):
    """torchrun's processes on one node fetch the same input at once: one downloads it, the
    others wait and read that copy; a later job on the node finds it there."""
    local = prepared(tmp_path)
    staged = staging.stage(store, local, "prepared")
    downloads = recorded(monkeypatch, "download")
    cache, start, paths = tmp_path / "node-cache", threading.Barrier(4), []

    def process():
        start.wait()
        paths.append(staging.fetch(staged, cache))

    threads = [threading.Thread(target=process) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert len(paths) == 4 and len(set(paths)) == 1
    assert len(downloads) == len(files_of(local)) and files_of(paths[0]) == files_of(local)
    assert staging.fetch(staged, cache) == paths[0] and len(downloads) == len(files_of(local))


def test_refused_credentials_are_named(store, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(CheckpointStoreError, match="AWS_SECRET_ACCESS_KEY") as err:
        staging.stage(store, prepared(tmp_path), "prepared")
    assert f"{store}/inputs/prepared-" in str(err.value)
