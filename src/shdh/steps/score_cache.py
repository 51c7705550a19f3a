"""A codes file's scores, kept between runs of the score step under a digest of what decides them.

Scoring ranks every query against the whole database: some 14 s per code set on 2 cores at
70,000 items, seven minutes for the default run's thirty. DVC reruns the whole stage when any
fit changes, so a one-setting experiment (`dvc exp run -S train.epochs=5`, which changes the
six deep fits) would rank the 21 unchanged baselines and the random floor again. The scores are a
pure function of the codes (bits, ancestors, segments), the scoring settings and the metric
code, so they are kept under a SHA-256 of exactly those, and byte-identical codes read them
back instead. Item ids, the fit's name and the thread count do not change a score and are left
out of the key; the metric code enters as its source fingerprint (shdh.runtime.source_fingerprint),
so an edit to the ranking or a metric scores everything afresh.

The entries live in the user's cache (shdh.runtime.user_cache: ~/.cache/shdh/scores, or
$SHDH_CACHE_DIR/scores), not in the stage's outputs, which DVC deletes before a rerun.
SHDH_SCORE_CACHE=0 turns it off. An entry that cannot be read is scored again (and replaced),
and a folder that cannot be written only costs time.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from shdh.core.codes_file import Codes
from shdh.core.metrics import Curves
from shdh.runtime import user_cache
from shdh.runtime.source_fingerprint import fingerprint

# Bumped when an entry's layout changes, so that old entries are never read as new ones.
FORMAT = "shdh-scores/1"
SWITCH = "SHDH_SCORE_CACHE"
WHAT = "a score-cache entry"
METRIC_CODE = "shdh.core.metrics"  # with every shdh module it imports: ranking, weights, peers
CURVE_FIELDS = ("wr_at_n", "radius", "radius_real", "wr_at_radius")
# The arrays of a codes file that decide its scores, in the order they enter the digest.
SCORED_ARRAYS = (
    "query_codes",
    "db_codes",
    "query_ancestors",
    "db_ancestors",
    "segment_sizes",
    "segment_weights",
)

Scores = tuple[dict[str, float], Curves]


def cache_dir() -> Path | None:
    """The folder of entries, or None when SHDH_SCORE_CACHE=0 turns the cache off."""
    return user_cache.cache_dir("scores", SWITCH)


def entry_key(codes: Codes, settings: dict[str, Any]) -> str:
    """The SHA-256 of the format, the metric code, the scoring settings and the scored arrays
    (dtype, shape and bytes of each, so that equal bytes of another shape never collide)."""
    digest = hashlib.sha256(FORMAT.encode())
    header = {"code": fingerprint([METRIC_CODE]), "settings": settings}
    digest.update(json.dumps(header, sort_keys=True, default=list).encode())
    for name in SCORED_ARRAYS:
        array = np.ascontiguousarray(getattr(codes, name))
        digest.update(f"\n{name} {array.dtype.str} {array.shape}\n".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def cached_scores(
    codes: Codes, settings: dict[str, Any], compute: Callable[[], Scores]
) -> tuple[Scores, bool]:
    """compute()'s metrics and curves for these codes, read from the cache where an entry has
    them, else computed and stored for the next run; with whether they were read."""
    folder = cache_dir()
    if folder is None:
        return compute(), False
    path = folder / f"{entry_key(codes, settings)}.npz"
    found = _read(path)
    if found is not None:
        return found, True
    scores = compute()
    _write(path, scores)
    return scores, False


def _read(path: Path) -> Scores | None:
    """An entry's scores; None where there is none, or where it cannot be read (said once)."""
    arrays = user_cache.read_entry(path, WHAT)
    if arrays is None:
        return None
    try:
        metrics = json.loads(str(arrays["metrics"]))
        curves = Curves(**{field: arrays[field] for field in CURVE_FIELDS})
        if not isinstance(metrics, dict):
            raise ValueError(f"'metrics' holds {type(metrics).__name__}, not an object")
    except (ValueError, KeyError) as err:
        user_cache.damaged(path, WHAT, err)
        return None
    return metrics, curves


def _write(path: Path, scores: Scores) -> None:
    metrics, curves = scores
    arrays = {field: np.asarray(getattr(curves, field)) for field in CURVE_FIELDS}
    user_cache.write_entry(path, {"metrics": np.array(json.dumps(metrics)), **arrays}, SWITCH)
