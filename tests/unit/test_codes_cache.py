"""The codes cache: a model that encoded these rows before gives back the same codes without
encoding; anything that decides the codes keys a new entry; a damaged, unwritable or disabled
cache costs time, never a wrong or failed run."""

from __future__ import annotations

import dataclasses
import json
import logging
from pathlib import Path

import numpy as np
import pytest

from shdh.core.level_weights import layer_weights
from shdh.data.shards import LocalShards, ShardedImages
from shdh.hashers import hasher_class, load_hasher
from shdh.hashers.supervision import PairSimilarity
from shdh.steps import codes_cache
from shdh.steps.codes_cache import RowKeys, content_digest
from tests.unit.toys import TINY_NET, deep_hasher, tree_set

pytestmark = pytest.mark.usefixtures("one_torch_thread")

FEATURES, IMAGES, ANCESTORS = tree_set(seed=0, per_leaf=6)  # 54 items
ROWS = np.arange(10, 54)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SHDH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SHDH_CODES_CACHE", raising=False)
    return tmp_path / "cache" / "codes"


@pytest.fixture(scope="module")
def itq():
    return hasher_class("itq")(n_bits=16, seed=0).fit(FEATURES)


@pytest.fixture(scope="module")
def shdh(tmp_path_factory):
    """A tiny SHDH, saved and loaded back as the score step loads it."""
    pairs = PairSimilarity(ANCESTORS, layer_weights(3), "hierarchical")
    fitted = deep_hasher(hasher_class("shdh"), n_bits=12, **TINY_NET).fit(IMAGES, pairs)
    return load_hasher(fitted.save(tmp_path_factory.mktemp("shdh") / "hasher"))


def _keys(**inputs) -> RowKeys:
    return RowKeys({"features": FEATURES, "images": IMAGES, **inputs})


def _counting(hasher, calls: list[int]):
    """The hasher with its encode counted (on the instance, so that its key is unchanged)."""
    real = type(hasher).encode

    def encode(X):
        calls.append(len(X))
        return real(hasher, X)

    hasher.encode = encode
    return hasher


@pytest.mark.parametrize("method", ["itq", "shdh"])
def test_a_model_encodes_rows_once_and_reads_its_codes_back(method, request, cache):
    calls: list[int] = []
    hasher = _counting(request.getfixturevalue(method), calls)
    kind = hasher.input_kind
    X, key = _keys().inputs[kind][ROWS], _keys()(kind, ROWS)
    try:
        first, seconds, read = codes_cache.cached_encode(hasher, X, key)
        assert (read, calls) == (False, [len(ROWS)]) and seconds > 0
        again, again_seconds, read = codes_cache.cached_encode(hasher, X, key)
    finally:
        del hasher.encode
    assert read and calls == [len(ROWS)]  # not encoded a second time
    assert again.dtype == np.int8 and np.array_equal(again, first)
    assert np.array_equal(first, hasher.encode(X))
    assert again_seconds == seconds  # the time of the run that encoded them
    assert len(list(cache.glob("*.npz"))) == 1


def test_the_key_holds_what_decides_the_codes_and_not_where_the_model_is(
    shdh, tmp_path, monkeypatch
):
    keys = _keys()
    rows = keys("images", ROWS)
    key = codes_cache.entry_key(shdh, rows)
    copy = load_hasher(shdh.save(tmp_path / "elsewhere"))
    copy.work_dir = str(tmp_path / "another-work-dir")
    assert codes_cache.entry_key(copy, rows) == key  # the registered copy of a fit: one entry
    copy.model_.head.bias.data[0] += 1e-6  # other weights
    assert codes_cache.entry_key(copy, rows) != key
    assert codes_cache.entry_key(shdh, keys("images", ROWS[1:])) != key
    assert codes_cache.entry_key(shdh, keys("images", ROWS[::-1])) != key
    with monkeypatch.context() as patch:
        patch.setenv("SHDH_CPU_PIN", "off")
        assert codes_cache.entry_key(shdh, rows) != key
    with monkeypatch.context() as patch:
        threads = dataclasses.replace(shdh.loop, num_threads=7)  # float sums follow them
        patch.setattr(shdh, "loop", threads)
        assert codes_cache.entry_key(shdh, rows) != key
    with monkeypatch.context() as patch:
        patch.setattr(codes_cache, "fingerprint", lambda modules: {"shdh.nets.cnnf": "edited"})
        assert codes_cache.entry_key(shdh, rows) != key
    assert codes_cache.entry_key(shdh, rows) == key


def test_rows_keys_follow_the_inputs_content(tmp_path):
    key = _keys()("images", ROWS)
    assert _keys(images=IMAGES.copy())("images", ROWS) == key
    edited = IMAGES.copy()
    edited[-1, 0, 0] ^= 1  # one pixel of one item
    assert _keys(images=edited)("images", ROWS) != key
    assert _keys()("features", ROWS) != key
    np.save(tmp_path / "images.npy", IMAGES)  # memory-mapped, read a piece at a time
    mapped = np.load(tmp_path / "images.npy", mmap_mode="r")
    assert content_digest(mapped) == content_digest(IMAGES)
    assert _keys(images=[IMAGES])("images", ROWS) is None  # no digest: not cached


@dataclasses.dataclass(frozen=True)
class Downloaded:
    """A remote source's shards, as shdh.data.shards_s3 lists them: verified on download."""

    digests: tuple[str, ...]


def test_sharded_images_are_keyed_by_their_listed_digests_and_unlisted_ones_not_cached(
    itq, tmp_path, cache
):
    files = ("images/shard-00000.npy", "images/shard-00001.npy")
    (tmp_path / "images").mkdir()
    for name, rows in zip(files, (20, 34), strict=True):
        np.save(tmp_path / name, np.zeros((rows, 32, 32), np.uint8))
    shards = [
        {"file": f, "rows": r, "sha256": d} for f, r, d in zip(files, (20, 34), "12", strict=True)
    ]
    (tmp_path / "meta.json").write_text(json.dumps({"shards": shards}))
    local = ShardedImages(LocalShards(tmp_path, files), [20, 34], (32, 32))
    key = content_digest(local)
    assert key is not None and content_digest(local) == key
    with open(tmp_path / files[1], "r+b") as f:  # cut short, as by a partial restore
        f.truncate(1000)
    assert content_digest(local) != key
    remote = ShardedImages(Downloaded(("1", "2")), [20, 34], (32, 32))
    assert content_digest(remote) is not None
    assert content_digest(ShardedImages(Downloaded(("1", "3")), [20, 34], (32, 32))) != (
        content_digest(remote)
    )
    del shards[1]["sha256"]
    (tmp_path / "meta.json").write_text(json.dumps({"shards": shards}))
    assert content_digest(local) is None
    calls: list[int] = []
    hasher = _counting(itq, calls)
    try:
        for _ in range(2):
            codes, _, read = codes_cache.cached_encode(hasher, FEATURES, None)
            assert not read and codes.shape == (54, 16)
    finally:
        del hasher.encode
    assert calls == [54, 54] and not cache.exists()


def test_an_edit_of_the_code_between_the_input_and_encode_keys_anew(itq):
    modules = codes_cache.fingerprint([type(itq).__module__, *codes_cache.ENCODING_CODE])
    # the shard reader that gathers the rows, and the packing of the entries themselves
    assert {"shdh.data.shards", "shdh.ranking.exact", "shdh.steps.split_inputs"} <= set(modules)


def test_with_the_cache_off_no_input_is_hashed(monkeypatch, cache):
    hashed = []
    monkeypatch.setattr(codes_cache, "content_digest", lambda X: hashed.append(X) or "digest")
    monkeypatch.setenv("SHDH_CODES_CACHE", "0")
    assert _keys()("images", ROWS) is None and hashed == []
    monkeypatch.delenv("SHDH_CODES_CACHE")
    assert _keys()("images", ROWS) is not None and len(hashed) == 1


def test_a_damaged_or_mismatched_entry_is_encoded_again_and_replaced(itq, cache, caplog):
    key = _keys()("features", ROWS)
    X = FEATURES[ROWS]
    first, _, _ = codes_cache.cached_encode(itq, X, key)
    [entry] = cache.glob("*.npz")
    entry.write_bytes(entry.read_bytes()[:100])  # cut short, as by a full disk
    with caplog.at_level(logging.WARNING, logger="shdh.runtime.user_cache"):
        again, _, read = codes_cache.cached_encode(itq, X, key)
    assert not read and np.array_equal(again, first)
    assert f"{entry}: cannot read a codes-cache entry: damaged or cut short" in caplog.text
    caplog.clear()
    # an entry that holds codes of other rows: never handed out as these rows' codes
    packed = np.packbits(first[:5] > 0, axis=1)
    np.savez(entry, packed=packed, n_bits=np.int64(16), seconds=np.float64(1.0))
    with caplog.at_level(logging.WARNING, logger="shdh.runtime.user_cache"):
        again, _, read = codes_cache.cached_encode(itq, X, key)
    assert not read and np.array_equal(again, first)
    assert "codes of shape (5, 16), expected (44, 16); computing it again" in caplog.text
    assert codes_cache.cached_encode(itq, X, key)[2] is True


def test_a_cache_folder_that_cannot_be_searched_is_said_once_and_encoding_goes_on(
    itq, monkeypatch, caplog, cache
):
    key = _keys()("features", ROWS)
    real = Path.is_file

    def forbidden(path):  # as for a folder of another user's, made under umask 077
        if cache in path.parents:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(Path, "is_file", forbidden)
    with caplog.at_level(logging.WARNING, logger="shdh.runtime.user_cache"):
        for _ in range(2):
            codes, _, read = codes_cache.cached_encode(itq, FEATURES[ROWS], key)
            assert not read and np.array_equal(codes, itq.encode(FEATURES[ROWS]))
    [warning] = [r.getMessage() for r in caplog.records]
    assert warning.startswith(f"{cache}: cannot read the cache there ([Errno 13] Permission")


def test_the_cache_can_be_turned_off_or_unwritable(itq, tmp_path, monkeypatch, caplog, cache):
    key = _keys()("features", ROWS)
    monkeypatch.setenv("SHDH_CODES_CACHE", "0")
    for _ in range(2):
        assert codes_cache.cached_encode(itq, FEATURES[ROWS], key)[2] is False
    assert not cache.exists()
    monkeypatch.delenv("SHDH_CODES_CACHE")
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder would go")
    monkeypatch.setenv("SHDH_CACHE_DIR", str(blocker))
    with caplog.at_level(logging.WARNING, logger="shdh.runtime.user_cache"):
        codes, _, read = codes_cache.cached_encode(itq, FEATURES[ROWS], key)
    assert not read and np.array_equal(codes, itq.encode(FEATURES[ROWS]))
    [warning] = [r.getMessage() for r in caplog.records]
    assert warning.startswith(f"{blocker / 'codes'}: cannot store entries of the cache there")
    assert warning.endswith("SHDH_CODES_CACHE=0")
