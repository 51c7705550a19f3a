"""A deep fit's training record: `work_dir/hasher.json`, what the checkpoint beside it was
trained with (the method, its settings, a fingerprint of the data and the code), and why a fit
may or may not continue it.

The training loop's own check covers the TrainConfig, the layout and the training indices, but
not the method's settings beyond its loss nor the pixels and labels, so the hasher writes this
record and resumes only when it agrees. Plain functions of the record, so that a caller judges a
checkpoint held elsewhere (an object store) before fetching it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from shdh.core.image_input import is_image_array
from shdh.runtime import source_fingerprint as code_fingerprint
from shdh.training.distributed import world_record
from shdh.training.loop_settings import RUNTIME_FIELDS

RUN_FILE = "hasher.json"  # in work_dir: what the checkpoint there was trained with
# Parameters that do not change what is computed, so a resumed run may differ in them (the
# training loop lets `epochs` grow, to extend a finished run).
RUNTIME_PARAMS = ("epochs", *RUNTIME_FIELDS, "work_dir")
FINGERPRINT_BYTES = 64 * 2**20  # pixels hashed at a time


def run_record(hasher: Any, images: np.ndarray, pairs: Any) -> dict[str, Any]:
    """What a checkpoint was trained with, as work_dir/hasher.json holds it (JSON-normalised, so
    that it compares equal to the file read back): the method, its parameters with the settings
    objects spelt out (their fields by their own names: alpha, eta, lr), the data, the code and
    the processes."""
    skip = (*RUNTIME_PARAMS, *hasher.code_only_params)
    params = {k: v for k, v in flat_params(hasher.get_params()).items() if k not in skip}
    params["loop"] = {k: v for k, v in params["loop"].items() if k not in skip}
    record = {
        "method": hasher.name,
        "params": params,
        "data_sha256": _fingerprint(images, pairs),
        "code": hasher.code_fingerprint(),
        **world_record(),
    }
    return json.loads(json.dumps(record))


def flat_params(params: dict[str, Any]) -> dict[str, Any]:
    """A deep hasher's parameters with its `settings` spelt out field by field (alpha, e1, ...;
    eta; reduction) and its `loop` kept as a group: the names params.yaml, the MLflow runs and
    the records that compare fits use."""
    flat = {k: v for k, v in params.items() if k not in ("settings", "loop")}
    if "settings" in params:
        flat.update(asdict(params["settings"]))
    if "loop" in params:
        flat["loop"] = asdict(params["loop"])
    return flat


def record_problem(path: Path, record: dict[str, Any]) -> str | None:
    """Why the run recorded at `path` is not this one (None when it is)."""
    try:
        saved = json.loads(path.read_text())
    except FileNotFoundError:
        return "no record of the run that made the checkpoint"
    except (OSError, ValueError) as err:
        return f"unreadable ({err})"
    if not isinstance(saved, dict):
        return "not a JSON object"
    for key in ("method", "data_sha256"):
        if saved.get(key) != record[key]:
            return f"field '{key}' is {saved.get(key)!r} there but {record[key]!r} now"
    changed = code_fingerprint.differing(saved.get("code"), record["code"])
    if changed:
        return f"made by other code: {', '.join(changed)} changed since"
    saved_params = saved.get("params") if isinstance(saved.get("params"), dict) else {}
    return _params_mismatch(saved_params, record["params"])


def check_images(name: str, X: Any) -> np.ndarray:
    """X as uint8 (N, H, W[, C]) images: an np.ndarray, or an array-like of rows read when
    indexed (a dataset's shards, shdh.data.shards), which the training loop and encoding only
    ever index by rows."""
    array_like = is_image_array(X)
    if not array_like or X.dtype != np.uint8 or X.ndim not in (3, 4):
        desc = f"{X.dtype} {X.shape}" if array_like else type(X).__name__
        raise ValueError(f"{name}: images must be a uint8 (N, H, W[, C]) array, got {desc}")
    if len(X) == 0:
        raise ValueError(f"{name}: images are empty")
    return X


def _fingerprint(images: np.ndarray, pairs: Any) -> str:
    """sha256 of the pixels, the ancestors, u and the pair mode: the data a checkpoint saw. The
    pixels are hashed a block of rows at a time (the same digest as all at once), so images
    larger than memory are never read whole."""
    h = hashlib.sha256()
    h.update(f"{images.dtype}{images.shape}".encode())
    block = max(1, FINGERPRINT_BYTES // max(1, int(np.prod(images.shape[1:]))))
    for start in range(0, len(images), block):
        h.update(np.ascontiguousarray(images[start : start + block]).data)
    for arr in (np.asarray(pairs.ancestors), np.asarray(pairs.weights, np.float64)):
        h.update(f"{arr.dtype}{arr.shape}".encode())
        h.update(np.ascontiguousarray(arr).data)
    h.update(str(pairs.mode).encode())
    return h.hexdigest()


def _params_mismatch(saved: dict[str, Any], now: dict[str, Any], prefix: str = "") -> str | None:
    """The first parameter that differs, by its dotted name (loop.lr), so the message points at
    the one setting that changed rather than at a whole settings group."""
    for key, value in now.items():
        there = saved.get(key)
        if isinstance(there, dict) and isinstance(value, dict):
            found = _params_mismatch(there, value, f"{prefix}{key}.")
            if found:
                return found
        elif there != value:
            return f"parameter '{prefix}{key}' is {there!r} there but {value!r} now"
    return None
