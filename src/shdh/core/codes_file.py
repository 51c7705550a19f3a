"""The codes-file contract: one .npz per method and bit length, the only thing evaluation reads.

Every method, deep or shallow, ours or a baseline, ends in such a file, so one evaluator scores
them all the same way and `shdh metrics CODES.npz` can check any of them. Keys:

- query_codes, db_codes: uint8, np.packbits of the bits (bit 1 means +1), (N, ceil(n_bits/8))
- n_bits: int; segment_sizes: ints summing to n_bits; segment_weights: the distance weight of
  each segment (floats, e.g. SHDH (1/2, 1/3, 1/6); plain Hamming (1.0,))
- query_ancestors, db_ancestors: int32 (N, K), root column included, -1 = no node; or, for
  multi-label data, int32 (N, K, M) ancestor sets: [i, k, :] the level-k ancestors of all of
  item i's labels, padded with -1 (query and database may differ in M)
- query_ids, db_ids: (N,) item ids, any non-object dtype

Loading validates everything up front, so a bad file fails with its name, the key and the
problem instead of a shape error deep inside ranking.
"""

from __future__ import annotations

import os
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shdh.core.metrics import Curves, evaluate
from shdh.core.peer_metrics import MAHP_DEPTHS, MAP_DEPTHS
from shdh.core.similarity import check_ancestors
from shdh.ranking.exact import integer_weights
from shdh.runtime.atomic import atomic_path

# A folder of codes files, as the score step writes them and a bundle's trainer returns them:
# CODES_DIR/NAME.npz, each beside its fit record FITS_DIR/NAME.json (shdh.bundle).
CODES_DIR = "codes"
FITS_DIR = "fits"
ZIP_MAGIC = b"PK\x03\x04"  # every .npz is a zip archive, and every zip starts so

KEYS = (
    "query_codes",
    "db_codes",
    "n_bits",
    "segment_sizes",
    "segment_weights",
    "query_ancestors",
    "db_ancestors",
    "query_ids",
    "db_ids",
)


class CodesFileError(ValueError):
    """A codes file that is missing, unreadable or breaks the contract."""


@dataclass
class Codes:
    """The contents of one codes file (see the module docstring for shapes and dtypes)."""

    query_codes: np.ndarray
    db_codes: np.ndarray
    n_bits: int
    segment_sizes: np.ndarray
    segment_weights: np.ndarray
    query_ancestors: np.ndarray
    db_ancestors: np.ndarray
    query_ids: np.ndarray
    db_ids: np.ndarray


def save_codes(path: str | os.PathLike[str], codes: Codes) -> None:
    """Validate, then write atomically (a temporary sibling, then rename)."""
    path = Path(path)
    arrays = _validated(_arrays_of(codes), str(path))
    with atomic_path(path) as tmp, open(tmp, "xb") as f:  # a file object: savez adds no suffix
        np.savez(f, **arrays)
        f.flush()
        os.fsync(f.fileno())


def load_codes(path: str | os.PathLike[str]) -> Codes:
    """Read and validate a codes file; any problem raises CodesFileError naming file and key."""
    path = Path(path)
    name = str(path)  # the whole path: results/.../codes/X.npz and a bundle's X.npz differ
    if path.is_dir():
        raise CodesFileError(f"{path}: a folder; give one codes file in it (codes/NAME.npz)")
    if not path.is_file():
        raise CodesFileError(f"{path}: no such codes file")
    with open(path, "rb") as head:
        # numpy takes anything that is neither .npy nor .npz for a pickle, and its refusal then
        # suggests loading it unsafely: a text file or an image must not get that advice.
        if head.read(len(ZIP_MAGIC)) != ZIP_MAGIC:
            raise CodesFileError(f"{name}: not an .npz archive (docs/codes-format.md)")
    try:
        data = np.load(path, allow_pickle=False)
        if not isinstance(data, np.lib.npyio.NpzFile):  # a plain .npy loads as an array
            raise CodesFileError(f"{name}: not an .npz archive")
        with data:
            missing = [k for k in KEYS if k not in data.files]
            if missing:
                raise CodesFileError(f"{name}: missing key(s) {', '.join(map(repr, missing))}")
            arrays = {k: data[k] for k in KEYS}
    except CodesFileError:
        raise
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise CodesFileError(f"{name}: not a readable .npz archive ({exc})") from exc
    arrays = _validated(arrays, name)
    return Codes(**arrays)


def evaluate_codes_file(
    path: str | os.PathLike[str], *, n: int = 100, workers: int = 1
) -> dict[str, float]:
    """The metrics dict of `shdh.core.metrics.evaluate` for one codes file (what `shdh metrics`
    prints as JSON)."""
    codes = load_codes(path)
    metrics, _ = evaluate_codes(
        codes, n=n, workers=workers, map_depths=MAP_DEPTHS, mahp_depths=MAHP_DEPTHS
    )
    return metrics


def evaluate_codes(codes: Codes, **settings: Any) -> tuple[dict[str, float], Curves]:
    """`shdh.core.metrics.evaluate` of a codes file's contents, with its keyword settings."""
    return evaluate(
        codes.query_codes,
        codes.db_codes,
        codes.query_ancestors,
        codes.db_ancestors,
        codes.segment_sizes,
        codes.segment_weights,
        **settings,
    )


def _arrays_of(codes: Codes) -> dict[str, np.ndarray]:
    return {k: np.asarray(getattr(codes, k)) for k in KEYS}


def _validated(a: dict[str, np.ndarray], name: str) -> dict:
    """Check the contract; return the arrays with canonical dtypes (n_bits as int)."""
    check = _Contract(a, name)
    out: dict = {"n_bits": check.n_bits()}
    for side in ("query", "db"):
        out[f"{side}_codes"] = check.codes(side, out["n_bits"])
    out["segment_sizes"], out["segment_weights"] = _segments(check, out["n_bits"])
    for side in ("query", "db"):
        n_rows = out[f"{side}_codes"].shape[0]
        out[f"{side}_ancestors"] = _ancestors(check, side, n_rows)
        out[f"{side}_ids"] = check.ids(side, n_rows)
    k_query, k_db = out["query_ancestors"].shape[1], out["db_ancestors"].shape[1]
    if k_query != k_db:
        raise check.fail(
            f"key 'query_ancestors' has K = {k_query} levels but 'db_ancestors' has {k_db}"
        )
    return out


class _Contract:
    """The checks of one codes file's arrays, key by key; each failure names file and key."""

    def __init__(self, arrays: dict[str, np.ndarray], name: str) -> None:
        self.a, self.name = arrays, name

    def fail(self, problem: str) -> CodesFileError:
        return CodesFileError(f"{self.name}: {problem}")

    def integer(self, key: str, ndim: int, hint: str = "") -> np.ndarray:
        v = np.asarray(self.a[key])
        if v.ndim != ndim or not np.issubdtype(v.dtype, np.integer):
            raise self.fail(
                f"key {key!r} must be a {ndim}-D integer array{hint}, got {v.dtype} {v.shape}"
            )
        return v

    def n_bits(self) -> int:
        n_bits = int(self.integer("n_bits", 0))
        if n_bits < 1:
            raise self.fail(f"key 'n_bits' must be >= 1, got {n_bits}")
        return n_bits

    def codes(self, side: str, n_bits: int) -> np.ndarray:
        key, width = f"{side}_codes", -(-n_bits // 8)
        v = np.asarray(self.a[key])
        if v.dtype != np.uint8 or v.ndim != 2:
            raise self.fail(f"key {key!r} must be a 2-D uint8 array, got {v.dtype} {v.shape}")
        if v.shape[0] == 0:
            raise self.fail(f"key {key!r} holds no codes: a file needs one item at least")
        if v.shape[1] != width:
            raise self.fail(
                f"key {key!r} has {v.shape[1]} bytes per code but n_bits = {n_bits} "
                f"packs into {width}"
            )
        pad = 8 * width - n_bits
        if pad and v.shape[0] and np.any(v[:, -1] & np.uint8((1 << pad) - 1)):
            raise self.fail(f"key {key!r} has bits set past n_bits = {n_bits} (padding must be 0)")
        return v

    def ids(self, side: str, n_rows: int) -> np.ndarray:
        key = f"{side}_ids"
        ids = np.asarray(self.a[key])
        if ids.ndim != 1 or ids.dtype == object:
            raise self.fail(
                f"key {key!r} must be a 1-D non-object array, got {ids.dtype} {ids.shape}"
            )
        if ids.shape[0] != n_rows:
            raise self.fail(
                f"key {key!r} has {ids.shape[0]} entries but '{side}_codes' has {n_rows}"
            )
        return ids


def _segments(check: _Contract, n_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """segment_sizes (summing to n_bits) and one integer-valued weight per segment."""
    sizes = check.integer("segment_sizes", 1)
    if sizes.size == 0 or np.any(sizes < 1):
        raise check.fail(f"key 'segment_sizes' must be non-empty and >= 1, got {sizes.tolist()}")
    if int(sizes.sum()) != n_bits:
        raise check.fail(f"key 'segment_sizes' sums to {int(sizes.sum())} but n_bits = {n_bits}")
    weights = np.asarray(check.a["segment_weights"])
    if weights.ndim != 1 or not np.issubdtype(weights.dtype, np.number):
        raise check.fail(f"key 'segment_weights' must be a 1-D numeric array, got {weights.dtype}")
    if weights.shape != sizes.shape:
        raise check.fail(
            f"key 'segment_weights' has {weights.size} entries but 'segment_sizes' has {sizes.size}"
        )
    try:
        integer_weights(weights)
    except ValueError as exc:
        raise check.fail(f"key 'segment_weights': {exc}") from exc
    return sizes.astype(np.int64), weights.astype(np.float64)


def _ancestors(check: _Contract, side: str, n_rows: int) -> np.ndarray:
    """(N, K) ancestor ids, or (N, K, M) ancestor sets padded with -1, one row per code."""
    key = f"{side}_ancestors"
    try:
        anc = check_ancestors(
            check.a[key], f"key {key!r}", rows=n_rows, rows_of=f"'{side}_codes' has"
        )
    except ValueError as exc:
        raise check.fail(str(exc)) from None
    if anc.shape[1] < 2:
        raise check.fail(f"key {key!r} has {anc.shape[1]} level(s); K >= 2 (root included)")
    return anc.astype(np.int32)
