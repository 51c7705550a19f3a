"""Fashion-MNIST raw files: fetching from each kind of source, checking, and pooling."""

import gzip
import hashlib
import http.server
import os
import re
import threading
from functools import partial

import numpy as np
import pytest

from shdh.data import fashion_mnist as fm
from shdh.data.download import DownloadError
from shdh.data.idx import DataFormatError, read_idx, write_idx
from shdh.runtime.errors import ConfigError


def write_fake_raw(directory, n_train=12, n_test=5, *, compress=True, seed=0):
    """Small files with the upstream names and layout; returns {key: decompressed bytes}."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    arrays = {
        "train_images": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "train_labels": (np.arange(n_train) % 10).astype(np.uint8),
        "test_images": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "test_labels": (np.arange(n_test)[::-1] % 10).astype(np.uint8),
    }
    content = {}
    for key, array in arrays.items():
        name = fm.FILES[key] + (".gz" if compress else "")
        path = write_idx(directory / name, array, gzip_compress=compress)
        raw = path.read_bytes()
        content[key] = gzip.decompress(raw) if compress else raw
    return arrays, content


@pytest.fixture
def fake_md5(monkeypatch):
    """Point CONTENT_MD5 at the fake files so verify=True can be exercised."""

    def apply(content):
        md5 = {k: hashlib.md5(v).hexdigest() for k, v in content.items()}
        monkeypatch.setattr(fm, "CONTENT_MD5", md5)
        return md5

    return apply


def _siblings(path):
    return sorted(os.listdir(path.parent))


def test_source_urls(monkeypatch, tmp_path):
    monkeypatch.setattr(fm, "DEBIAN_DIR", tmp_path / "deb")
    assert fm.source_urls("debian", "a.gz") == [str(tmp_path / "deb" / "a.gz")]
    assert fm.source_urls("official", "a.gz") == [
        "https://fashion-mnist.s3-website.eu-central-1.amazonaws.com/a.gz",
        "http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/a.gz",
    ]
    assert fm.source_urls("s3://b/raw/", "a.gz") == ["s3://b/raw/a.gz"]
    assert fm.source_urls("file:///x/y", "a.gz") == ["file:///x/y/a.gz"]
    assert fm.source_urls("https://h/p", "a.gz") == ["https://h/p/a.gz"]
    assert fm.source_urls("rel/dir", "a.gz") == [str(os.path.join("rel", "dir", "a.gz"))]
    for unknown in ("ftp://x/y", "", "  "):
        with pytest.raises(ConfigError, match=re.escape(f"source {unknown!r}: expected debian")):
            fm.source_urls(unknown, "a.gz")


def test_fetch_raw_from_directory_writes_plain_idx_only(tmp_path):
    _, content = write_fake_raw(tmp_path / "src")
    out = fm.fetch_raw(tmp_path / "raw", sources=[str(tmp_path / "src")], verify=False)
    assert out == tmp_path / "raw"
    assert sorted(os.listdir(out)) == sorted(fm.FILES.values())
    for key, name in fm.FILES.items():
        assert (out / name).read_bytes() == content[key]
    assert _siblings(out) == ["raw", "src"]  # the temporary download directory is gone


def test_fetch_raw_writes_the_decompressed_files_of_the_known_md5s(tmp_path, fake_md5):
    _, content = write_fake_raw(tmp_path / "src")
    fake_md5(content)
    fm.fetch_raw(tmp_path / "raw", sources=[(tmp_path / "src").as_uri()])
    for key, name in fm.FILES.items():
        assert (
            hashlib.md5((tmp_path / "raw" / name).read_bytes()).hexdigest() == (fm.CONTENT_MD5[key])
        )


def test_fetch_raw_md5_mismatch_names_file_and_both_md5s(tmp_path, fake_md5):
    _, content = write_fake_raw(tmp_path / "src")
    fake_md5(content)
    fm.CONTENT_MD5["test_images"] = "f" * 32
    with pytest.raises(DataFormatError) as info:
        fm.fetch_raw(tmp_path / "raw", sources=[str(tmp_path / "src")])
    assert str(info.value) == (
        f"t10k-images-idx3-ubyte.gz: decompressed md5 mismatch: expected {'f' * 32}, "
        f"got {hashlib.md5(content['test_images']).hexdigest()}"
    )
    assert "t10k-images-idx3-ubyte" not in os.listdir(tmp_path / "raw")
    assert _siblings(tmp_path / "raw") == ["raw", "src"]


def test_fetch_raw_is_idempotent(tmp_path, fake_md5, monkeypatch):
    _, content = write_fake_raw(tmp_path / "src")
    fake_md5(content)
    fm.fetch_raw(tmp_path / "raw", sources=[str(tmp_path / "src")])
    stamps = {n: os.stat(tmp_path / "raw" / n).st_mtime_ns for n in fm.FILES.values()}

    def no_fetch(*args, **kwargs):
        raise AssertionError("fetch called although the files are present")

    monkeypatch.setattr(fm, "fetch", no_fetch)
    fm.fetch_raw(tmp_path / "raw", sources=[str(tmp_path / "src")])
    assert stamps == {n: os.stat(tmp_path / "raw" / n).st_mtime_ns for n in fm.FILES.values()}


def test_fetch_raw_replaces_a_file_with_the_wrong_md5(tmp_path, fake_md5):
    _, content = write_fake_raw(tmp_path / "src")
    fake_md5(content)
    fm.fetch_raw(tmp_path / "raw", sources=[str(tmp_path / "src")])
    damaged = tmp_path / "raw" / fm.FILES["train_labels"]
    damaged.write_bytes(b"\x00\x00\x08\x01")
    fm.fetch_raw(tmp_path / "raw", sources=[str(tmp_path / "src")])
    assert damaged.read_bytes() == content["train_labels"]


def test_fetch_raw_tries_sources_in_order(tmp_path, monkeypatch):
    _, content = write_fake_raw(tmp_path / "deb", seed=1)
    _, other = write_fake_raw(tmp_path / "later", seed=2)
    monkeypatch.setattr(fm, "DEBIAN_DIR", tmp_path / "deb")
    monkeypatch.setattr(fm, "OFFICIAL_URLS", ["http://127.0.0.1:9/never/"])  # not reached
    sources = [str(tmp_path / "empty"), "debian", str(tmp_path / "later"), "official"]
    fm.fetch_raw(tmp_path / "raw", sources=sources, verify=False)
    assert content["test_images"] != other["test_images"]
    assert (tmp_path / "raw" / fm.FILES["test_images"]).read_bytes() == content["test_images"]


@pytest.mark.integration  # serves the files over HTTP on loopback
def test_fetch_raw_from_official_urls_served_locally(tmp_path, monkeypatch):
    write_fake_raw(tmp_path / "site")
    handler = partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path / "site"))
    handler.log_message = lambda *a: None
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, args=(0.01,), daemon=True)
    thread.start()
    try:
        base = f"http://127.0.0.1:{server.server_address[1]}/"
        monkeypatch.setattr(fm, "OFFICIAL_URLS", [base + "missing/", base])
        monkeypatch.setattr(fm, "DEBIAN_DIR", tmp_path / "no-debian-here")
        fm.fetch_raw(tmp_path / "raw", verify=False)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
    images, labels, ids = fm.load_raw(tmp_path / "raw")
    assert images.shape == (17, 28, 28)


def test_fetch_raw_all_sources_missing(tmp_path):
    with pytest.raises(DownloadError, match="train-images-idx3-ubyte.gz: every source failed"):
        fm.fetch_raw(tmp_path / "raw", sources=[str(tmp_path / "a"), str(tmp_path / "b")])


def test_fetch_raw_truncated_gzip_names_file_and_writes_nothing(tmp_path):
    write_fake_raw(tmp_path / "src")
    gz = tmp_path / "src" / (fm.FILES["train_labels"] + ".gz")
    gz.write_bytes(gz.read_bytes()[:-12])
    with pytest.raises(DataFormatError, match=r"train-labels-idx1-ubyte\.gz: truncated gzip"):
        fm.fetch_raw(tmp_path / "raw", sources=[str(tmp_path / "src")], verify=False)
    assert os.listdir(tmp_path / "raw") == [fm.FILES["train_images"]]  # written before it
    assert _siblings(tmp_path / "raw") == ["raw", "src"]


def test_fetch_raw_short_payload_names_file(tmp_path):
    write_fake_raw(tmp_path / "src")
    gz = tmp_path / "src" / (fm.FILES["test_images"] + ".gz")
    gz.write_bytes(gzip.compress(gzip.decompress(gz.read_bytes())[:-100]))
    with pytest.raises(
        DataFormatError, match=r"t10k-images-idx3-ubyte\.gz: truncated payload: expected 3920"
    ):
        fm.fetch_raw(tmp_path / "raw", sources=[str(tmp_path / "src")], verify=False)
    assert fm.FILES["test_images"] not in os.listdir(tmp_path / "raw")


# --- load_raw ---------------------------------------------------------------------------------


@pytest.mark.parametrize("compress", [True, False])
def test_load_raw_pools_train_then_test(tmp_path, compress):
    arrays, _ = write_fake_raw(tmp_path, n_train=12, n_test=5, compress=compress)
    images, labels, ids = fm.load_raw(tmp_path)
    np.testing.assert_array_equal(images[:12], arrays["train_images"])
    np.testing.assert_array_equal(images[12:], arrays["test_images"])
    np.testing.assert_array_equal(labels, np.r_[arrays["train_labels"], arrays["test_labels"]])
    np.testing.assert_array_equal(ids, np.arange(17))
    assert (images.dtype, labels.dtype, ids.dtype) == (np.uint8, np.uint8, np.int64)


def test_load_raw_count_mismatch_names_labels_file(tmp_path):
    write_fake_raw(tmp_path)
    write_idx(tmp_path / (fm.FILES["test_labels"] + ".gz"), np.zeros(4, dtype=np.uint8))
    with pytest.raises(
        DataFormatError,
        match=r"t10k-labels-idx1-ubyte\.gz: count mismatch: 4 labels for 5 images in "
        r"t10k-images-idx3-ubyte\.gz",
    ):
        fm.load_raw(tmp_path)


def test_load_raw_rejects_label_out_of_range(tmp_path):
    write_fake_raw(tmp_path)
    write_idx(tmp_path / (fm.FILES["train_labels"] + ".gz"), np.full(12, 10, dtype=np.uint8))
    with pytest.raises(
        DataFormatError, match=r"train-labels-idx1-ubyte\.gz: labels: value 10 outside 0..9"
    ):
        fm.load_raw(tmp_path)


def test_load_raw_rejects_wrong_image_shape(tmp_path):
    write_fake_raw(tmp_path)
    write_idx(tmp_path / (fm.FILES["train_images"] + ".gz"), np.zeros((12, 32, 32), np.uint8))
    with pytest.raises(DataFormatError, match=r"train-images-idx3-ubyte\.gz: images: expected"):
        fm.load_raw(tmp_path)


def test_load_raw_rejects_wrong_dtype(tmp_path):
    write_fake_raw(tmp_path)
    write_idx(tmp_path / (fm.FILES["test_labels"] + ".gz"), np.zeros(5, np.int32))
    with pytest.raises(DataFormatError, match=r"t10k-labels-idx1-ubyte\.gz: labels: expected"):
        fm.load_raw(tmp_path)


def test_load_raw_missing_file(tmp_path):
    write_fake_raw(tmp_path)
    (tmp_path / (fm.FILES["test_images"] + ".gz")).unlink()
    with pytest.raises(FileNotFoundError, match="t10k-images-idx3-ubyte"):
        fm.load_raw(tmp_path)


# --- the real data --------------------------------------------------------------------------


def test_real_debian_files(tmp_path):
    if not fm.DEBIAN_DIR.is_dir():
        pytest.skip(f"{fm.DEBIAN_DIR} not installed (Debian package dataset-fashion-mnist)")
    raw = fm.fetch_raw(tmp_path / "raw", sources=["debian"])
    for key, name in fm.FILES.items():
        data = (raw / name).read_bytes()
        assert hashlib.md5(data).hexdigest() == fm.CONTENT_MD5[key]
        assert read_idx(raw / name).shape == fm.SHAPES[key]
    images, labels, ids = fm.load_raw(raw)
    assert images.shape == (70000, 28, 28) and images.dtype == np.uint8
    np.testing.assert_array_equal(np.bincount(labels), np.full(10, 7000))  # balanced classes
    np.testing.assert_array_equal(ids, np.arange(70000))
    assert 0 < images.mean() < 255


# ---- the built-in tree ------------------------------------------------------------------


def _level_index(tree, anc: np.ndarray, level: int) -> list[int]:
    return np.searchsorted(tree.nodes_at_level(level), anc[:, level - 1]).tolist()


def test_the_built_in_tree() -> None:
    tree = fm.label_tree()
    assert tree.height == 4
    assert [int((tree.levels == k).sum()) for k in (1, 2, 3, 4)] == [1, 2, 6, 10]
    level3 = [tree.names[i] for i in tree.nodes_at_level(3)]
    assert level3 == ["Tops", "Bottoms", "Dresses", "Outers", "Accessories", "Shoes"]
    paths = fm.label_paths()
    assert len(paths) == 10
    assert paths[0] == "Clothes/Tops/T-shirt" and paths[9] == "Goods/Shoes/Ankle boot"
    anc = tree.ancestors_of_labels(paths)
    assert _level_index(tree, anc, 3) == [0, 1, 0, 2, 3, 5, 0, 5, 4, 5]
    assert _level_index(tree, anc, 2) == [0, 0, 0, 0, 0, 1, 0, 1, 1, 1]
    assert [tree.names[i] for i in anc[:, 3]] == list(fm.FASHION_MNIST_CLASSES)
    assert all("/" not in c for c in fm.FASHION_MNIST_CLASSES)
