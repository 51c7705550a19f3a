"""A deep hasher's training folder: where its checkpoint lives, what it was trained with, and
whether a fit may continue it (or a sibling fit's).

The training loop's own check covers the TrainConfig, the layout and the training indices, but
not what the wrapper adds (DPSH's eta) nor the pixels and labels, so the hasher writes
`work_dir/hasher.json` (the method, its parameters and a fingerprint of the data and code) and
resumes only when that agrees.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from shdh.core.image_input import is_image_array
from shdh.core.objectives import flat_objective
from shdh.runtime import source_fingerprint as code_fingerprint
from shdh.runtime.atomic import atomic_path, atomic_write_text
from shdh.training.checkpoint import CHECKPOINT_NAME
from shdh.training.distributed import world_record
from shdh.training.loop_settings import RUNTIME_FIELDS

log = logging.getLogger(__name__)

RUN_FILE = "hasher.json"  # in work_dir: what the checkpoint there was trained with
# Parameters that do not change what is computed, so a resumed run may differ in them (the
# training loop lets `epochs` grow, to extend a finished run).
_RUNTIME_PARAMS = ("epochs", *RUNTIME_FIELDS, "work_dir")
FINGERPRINT_BYTES = 64 * 2**20  # pixels hashed at a time


class TrainingFolder:
    """The work_dir side of a deep hasher (shdh.hashers.deep.DeepHasher): its checkpoint's
    record, the resume decision and the reuse of a sibling fit's training."""

    @contextlib.contextmanager
    def _work_dir(self) -> Iterator[Path]:
        if self.work_dir is not None:
            yield Path(self.work_dir)
            return
        with tempfile.TemporaryDirectory(prefix=f"shdh-{self.name}-") as tmp:
            yield Path(tmp)

    def _run_record(self, images: np.ndarray, pairs: Any) -> dict[str, Any]:
        """What a checkpoint was trained with, as work_dir/hasher.json holds it (JSON-normalised,
        so it compares equal to the file read back). The objective's settings stand by their own
        names (alpha, eta), as in the records written before it became one argument, so that
        those checkpoints still resume."""
        skip = (*_RUNTIME_PARAMS, *self.code_only_params)
        params = {k: v for k, v in flat_objective(self.get_params()).items() if k not in skip}
        params["loop"] = {k: v for k, v in asdict(self.loop).items() if k not in skip}
        record = {
            "method": self.name,
            "params": params,
            "data_sha256": _fingerprint(images, pairs),
            "code": self.code_fingerprint(),
            **world_record(),
        }
        return json.loads(json.dumps(record))

    def code_fingerprint(self) -> dict[str, str]:
        """The digests of the code that decides this hasher's numbers: its own module and every
        shdh module it runs (shdh.runtime.source_fingerprint)."""
        return code_fingerprint.fingerprint([type(self).__module__])

    training_files: ClassVar[tuple[str, ...]] = (CHECKPOINT_NAME, RUN_FILE)

    def _prepare_work_dir(self, work_dir: Path, images: np.ndarray, pairs: Any, resume: str) -> str:
        """Decide whether the checkpoint in work_dir may be continued; record this run."""
        work_dir.mkdir(parents=True, exist_ok=True)
        run_path, ckpt_path = work_dir / RUN_FILE, work_dir / CHECKPOINT_NAME
        record = self._run_record(images, pairs)
        if resume != "never":
            problem = _record_mismatch(run_path, record)
            if problem is not None and resume == "always":
                raise ValueError(f"{run_path}: cannot resume: {problem}")
            if problem is not None:
                if ckpt_path.exists():
                    log.warning("%s: not resuming (%s); training from scratch", run_path, problem)
                resume = "never"
        if resume == "never":
            ckpt_path.unlink(missing_ok=True)  # never pair a stale checkpoint with a new record
            atomic_write_text(run_path, json.dumps(record, indent=2) + "\n")
        return resume


class ReusedTraining:
    """Whether a fit may continue a training already done: its own folder's or a sibling
    fit's (TrainingFolder's record decides), and the copy of a sibling's."""

    def first_trained_as_here(
        self, work_dirs: Sequence[str | Path], X: np.ndarray, pairs: Any
    ) -> Path | None:
        """The first of work_dirs holding a checkpoint (training_files) made with this hasher's
        parameters (code_only_params and runtime ones aside) on this data: what resume would
        accept. The data is fingerprinted once for all the folders."""
        record = None
        for work_dir in map(Path, work_dirs):
            if not all((work_dir / name).is_file() for name in self.training_files):
                continue
            record = record or self._run_record(check_images(self.name, X), pairs)
            if _record_mismatch(work_dir / RUN_FILE, record) is None:
                return work_dir
        return None

    def start_from_sibling(
        self, work_dir: str | Path, siblings: Sequence[str | Path], X: np.ndarray, pairs: Any
    ) -> Path | None:
        """Copy into work_dir the training of the first of `siblings` (other fits' work folders)
        that this fit would resume, when the training does not depend on the code length
        (code_only_params names n_bits: the classifier oracle). Training again would repeat it
        exactly, at the full cost of a deep fit; resuming the copy continues an unfinished
        sibling to this fit's epochs. A matching checkpoint of work_dir's own comes first, and
        nothing is copied then. Temporary names, then rename. Returns the folder copied from."""
        if "n_bits" not in self.code_only_params:
            return None
        work_dir = Path(work_dir)
        found = self.first_trained_as_here([work_dir, *siblings], X, pairs)
        if found is None or found == work_dir:
            return None
        for name in self.training_files:
            with atomic_path(work_dir / name) as tmp:
                shutil.copyfile(found / name, tmp)
        log.info(
            "%s: starting from the training in %s (the code length does not change it)",
            work_dir,
            found,
        )
        return found

    def resume_problem(self, work_dir: str | Path, X: np.ndarray, pairs: Any) -> str | None:
        """Why fit(resume=...) would not continue the training recorded in work_dir's
        hasher.json on this data (None: it would). Needs only the record, so a caller can judge
        a checkpoint held elsewhere before fetching it."""
        record = self._run_record(check_images(self.name, X), pairs)
        return _record_mismatch(Path(work_dir) / RUN_FILE, record)


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


def _record_mismatch(path: Path, record: dict[str, Any]) -> str | None:
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
