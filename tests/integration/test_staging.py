"""A TrainJob's inputs staged in a real S3 server (SeaweedFS) by their content: uploaded by the
first fit that needs them, found whole by every other, fetched by the nodes file for file."""

from __future__ import annotations

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


@pytest.fixture
def uploads(monkeypatch) -> list[str]:
    """The names of the files uploaded from now on."""
    names: list[str] = []
    put = StoreFolder.put_file

    def counted(self, path, name):
        names.append(name)
        return put(self, path, name)

    monkeypatch.setattr(StoreFolder, "put_file", counted)
    return names


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


def test_refused_credentials_are_named(store, tmp_path, monkeypatch):
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "not-the-secret")
    with pytest.raises(CheckpointStoreError, match="AWS_SECRET_ACCESS_KEY") as err:
        staging.stage(store, prepared(tmp_path), "prepared")
    assert f"{store}/inputs/prepared-" in str(err.value)
