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

The entries live outside the stage's outputs, which DVC deletes before a rerun, and outside the
workspace, because queued experiments (`dvc exp run --queue`) each run in a temporary copy of it:
$SHDH_CACHE_DIR/scores, else $XDG_CACHE_HOME/shdh/scores, else ~/.cache/shdh/scores.
SHDH_SCORE_CACHE=0 turns it off. It is a cache, never a source of truth: an entry that cannot
be read is scored again (and replaced), and a folder that cannot be written only costs time.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from shdh.core.codes_file import Codes
from shdh.core.metrics import Curves
from shdh.runtime.array_files import load_arrays
from shdh.runtime.atomic import atomic_path
from shdh.runtime.source_fingerprint import fingerprint

log = logging.getLogger(__name__)

# Bumped when an entry's layout changes, so that old entries are never read as new ones.
FORMAT = "shdh-scores/1"
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
    if os.environ.get("SHDH_SCORE_CACHE", "1").strip() in ("0", "false", "no", "off"):
        return None
    if os.environ.get("SHDH_CACHE_DIR"):
        return Path(os.environ["SHDH_CACHE_DIR"]) / "scores"
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"]) / "shdh" / "scores"
    try:
        return Path.home() / ".cache" / "shdh" / "scores"
    except RuntimeError:  # no home (a bare container user): scoring goes on uncached
        return None


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
    if not path.is_file():
        return None
    try:
        arrays = load_arrays(path, "a score-cache entry", "it is scored again")
        metrics = json.loads(str(arrays["metrics"]))
        curves = Curves(**{field: arrays[field] for field in CURVE_FIELDS})
        if not isinstance(metrics, dict):
            raise ValueError(f"'metrics' holds {type(metrics).__name__}, not an object")
    except (ValueError, KeyError) as err:
        log.warning("%s: a damaged score-cache entry (%s); scoring again", path, err)
        return None
    return metrics, curves


_unwritable: set[Path] = set()  # folders already said to be unwritable


def _write(path: Path, scores: Scores) -> None:
    """Store an entry atomically. A folder that cannot be written is said once, not for each of
    a run's thirty code sets, and the run goes on without it."""
    metrics, curves = scores
    arrays = {field: np.asarray(getattr(curves, field)) for field in CURVE_FIELDS}
    try:
        with atomic_path(path, suffix=".npz") as tmp, open(tmp, "wb") as f:
            np.savez(f, metrics=np.array(json.dumps(metrics)), **arrays)
    except OSError as err:
        if path.parent not in _unwritable:
            _unwritable.add(path.parent)
            log.warning(
                "%s: cannot store scores in the score cache (%s); set SHDH_CACHE_DIR to a "
                "writable folder, or SHDH_SCORE_CACHE=0",
                path.parent,
                err,
            )
