"""The score cache: byte-identical codes read their scores back, anything that decides a score
keys a new entry, and a damaged or unwritable cache costs time, never a wrong or failed run."""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import pytest

from shdh.core.codes_file import Codes, evaluate_codes
from shdh.steps import score_cache
from shdh.steps.score import scoring_settings

SETTINGS = scoring_settings({"n": 5, "wr_ns": [5, 10], "curve_max": 20}, n_db=20)


def _codes(seed: int = 0) -> Codes:
    rng = np.random.default_rng(seed)
    leaves = rng.integers(0, 4, size=28)
    ancestors = np.stack([np.zeros(28), leaves // 2 + 1, leaves + 3], axis=1).astype(np.int32)
    return Codes(
        query_codes=rng.integers(0, 256, size=(8, 2), dtype=np.uint8),
        db_codes=rng.integers(0, 256, size=(20, 2), dtype=np.uint8),
        n_bits=16,
        segment_sizes=np.array([8, 8]),
        segment_weights=np.array([2 / 3, 1 / 3]),
        query_ancestors=ancestors[:8],
        db_ancestors=ancestors[8:],
        query_ids=np.arange(8),
        db_ids=np.arange(8, 28),
    )


def _compute(codes: Codes, calls: list[str]):
    def compute():
        calls.append("ranked")
        return evaluate_codes(codes, **SETTINGS)

    return compute


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SHDH_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("SHDH_SCORE_CACHE", raising=False)
    return tmp_path / "cache" / "scores"


def test_unchanged_codes_read_their_scores_back_without_ranking_again(cache):
    codes, calls = _codes(), []
    (metrics, curves), read = score_cache.cached_scores(codes, SETTINGS, _compute(codes, calls))
    assert (calls, read) == (["ranked"], False) and len(list(cache.glob("*.npz"))) == 1
    again, read = score_cache.cached_scores(codes, SETTINGS, _compute(codes, calls))
    assert (calls, read) == (["ranked"], True)
    assert again[0] == metrics and list(again[0]) == list(metrics)  # values and their order
    assert all(type(value) is float for value in again[0].values())
    for field in score_cache.CURVE_FIELDS:
        ours, theirs = getattr(curves, field), getattr(again[1], field)
        assert ours.dtype == theirs.dtype and np.array_equal(ours, theirs), field


def test_the_key_holds_what_decides_a_score_and_nothing_else(monkeypatch):
    codes = _codes()
    key = score_cache.entry_key(codes, SETTINGS)
    renamed = dataclasses.replace(codes, query_ids=codes.query_ids + 100)
    assert score_cache.entry_key(renamed, SETTINGS) == key  # ids do not change a score
    flipped = codes.db_codes.copy()
    flipped[3, 1] ^= 1
    changed = [
        dataclasses.replace(codes, db_codes=flipped),
        dataclasses.replace(codes, db_ancestors=codes.db_ancestors[::-1].copy()),
        dataclasses.replace(codes, segment_weights=np.array([0.5, 0.5])),
        dataclasses.replace(codes, segment_sizes=np.array([4, 12])),
        # the same bytes in another shape: 8 x 2 bytes read as 4 x 4
        dataclasses.replace(codes, query_codes=codes.query_codes.reshape(4, 4)),
    ]
    keys = {score_cache.entry_key(c, SETTINGS) for c in changed}
    assert key not in keys and len(keys) == len(changed)
    for setting, value in (("n", 6), ("wr_ns", (5,)), ("radius_queries", 3)):
        assert score_cache.entry_key(codes, {**SETTINGS, setting: value}) != key, setting
    monkeypatch.setattr(score_cache, "fingerprint", lambda modules: {"shdh.core.metrics": "x"})
    assert score_cache.entry_key(codes, SETTINGS) != key  # an edit of the metric code


def test_a_damaged_entry_is_scored_again_and_replaced(cache, caplog):
    codes, calls = _codes(), []
    first, _ = score_cache.cached_scores(codes, SETTINGS, _compute(codes, calls))
    [entry] = cache.glob("*.npz")
    entry.write_bytes(entry.read_bytes()[:100])  # cut short, as by a full disk
    with caplog.at_level(logging.WARNING, logger="shdh.runtime.user_cache"):
        again, read = score_cache.cached_scores(codes, SETTINGS, _compute(codes, calls))
    assert (calls, read) == (["ranked", "ranked"], False) and again[0] == first[0]
    assert f"{entry}: cannot read a score-cache entry: damaged or cut short" in caplog.text
    assert score_cache.cached_scores(codes, SETTINGS, _compute(codes, calls))[1] is True


def test_a_cache_that_cannot_be_written_only_costs_time(tmp_path, monkeypatch, caplog):
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder would go")
    monkeypatch.setenv("SHDH_CACHE_DIR", str(blocker))
    calls = []
    with caplog.at_level(logging.WARNING, logger="shdh.runtime.user_cache"):
        for seed in range(3):  # three code sets of one run: one warning
            codes = _codes(seed)
            (metrics, _), read = score_cache.cached_scores(codes, SETTINGS, _compute(codes, calls))
            assert read is False and metrics["ndcg@5"] >= 0
    assert calls == ["ranked"] * 3
    [warning] = [r.getMessage() for r in caplog.records]
    assert warning.startswith(f"{blocker / 'scores'}: cannot store entries of the cache there")
    assert warning.endswith("SHDH_SCORE_CACHE=0")


def test_the_cache_can_be_turned_off_and_follows_xdg(tmp_path, monkeypatch, cache):
    monkeypatch.setenv("SHDH_SCORE_CACHE", "0")
    codes, calls = _codes(), []
    for _ in range(2):
        assert score_cache.cached_scores(codes, SETTINGS, _compute(codes, calls))[1] is False
    assert calls == ["ranked", "ranked"] and not cache.exists()
    monkeypatch.delenv("SHDH_SCORE_CACHE")
    monkeypatch.delenv("SHDH_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert score_cache.cache_dir() == tmp_path / "xdg" / "shdh" / "scores"
