"""The fit step: fit one method at one code length on the training pool, tracked in MLflow.

Every method, deep or shallow, goes through the same function: the same training items (a
seeded prefix of the database order), the same pair labels from the S-matrix artifact (in the
mode the method asks for), and the same record (a saved hasher, its fit time, its MLflow run).
What differs is only the input: uint8 images for deep methods, GIST features for shallow ones.
Which fits a run asks for, and what each is called, is the run plan's business (shdh.plan
makes the `Fit`s); this step takes one and carries it out.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shdh import tracking
from shdh.atomic import atomic_write_text
from shdh.devices import resolve_device
from shdh.errors import ConfigError
from shdh.hashers import get_hasher_class
from shdh.hashers.base import Hasher
from shdh.hashers.supervision import PairSimilarity
from shdh.loop import LoopSettings
from shdh.losses import flat_objective
from shdh.progress import bars
from shdh.steps.features import load_features
from shdh.training import RESUME_MODES

log = logging.getLogger(__name__)

HASHER_DIR = "hasher"  # inside a model folder: params.json + state.npz
RUN_REF = "mlflow_run.json"
FIT_RECORD = "fit.json"
WORK_DIR = "work"  # inside a deep model folder: the checkpoint and its run record
ENCODER_EXAMPLE_ITEMS = 2  # training images stored with a logged encoder as its input example


def run_name(method: str, bits: int, seed: int | None = None) -> str:
    """METHOD-BITS, or METHOD-BITS-seedS for one of several fits that differ only by seed: the
    name of the model folder, the MLflow run and the codes file."""
    return f"{method}-{bits}" if seed is None else f"{method}-{bits}-seed{seed}"


def is_deep(method: str) -> bool:
    """Deep methods train a network on images; the others fit GIST features."""
    return get_hasher_class(method).input_kind == "images"


@dataclass(frozen=True)
class Fit:
    """One fit of a run: a method at a code length with one seed, where it lives, and the
    method's constructor arguments (shdh.plan makes these from the settings)."""

    method: str
    bits: int
    seed: int  # the seed the fit uses: its own, else the master seed
    own_seed: int | None  # set when the settings list seeds: the fit is named with it
    name: str  # METHOD-BITS[-seedS]: the model folder's, the codes file's and the run's name
    out_dir: Path  # the model folder
    params: dict[str, Any]  # the method's constructor arguments (hyper-parameters)
    n_train: int | None = None  # the first n of the seeded training pool; None: all of it

    @property
    def deep(self) -> bool:
        return is_deep(self.method)


def training_inputs(
    cls: type[Hasher],
    prepared_dir: Path,
    smatrix_path: Path,
    features_path: Path | None,
    n_train: int | None,
) -> tuple[np.ndarray, PairSimilarity]:
    """(X, pairs) for the training pool: images or GIST rows, and the S-matrix's pair labels."""
    from shdh.data.splits import training_subset
    from shdh.steps.prepare import load_prepared
    from shdh.steps.smatrix import load_smatrix

    ds, split = load_prepared(prepared_dir)
    s = load_smatrix(smatrix_path)
    train_idx = np.sort(training_subset(split, n_train))
    pairs = PairSimilarity(s.ancestors[train_idx], s.weights, cls.supervision or "label")
    if cls.input_kind == "images":
        return np.asarray(ds.images[train_idx]), pairs
    if features_path is None:
        raise ConfigError(f"{cls.name}: needs GIST features (run the features step first)")
    return load_features(features_path, len(ds.ids))[train_idx], pairs


def fit(
    plan: Fit,
    *,
    prepared_dir: str | Path,
    smatrix_path: str | Path,
    features_path: str | Path | None = None,
    resume: str = "never",
    progress: bool = True,
    tags: dict[str, str] | None = None,
    parent_run_id: str | None = None,
    checkpoints: Any = None,
) -> Path:
    """Fit `plan` and save it in plan.out_dir: the hasher, fit.json, and for deep methods the
    checkpoint, history.json and the MLflow run reference.

    resume (deep methods, training.RESUME_MODES): "auto" continues a matching checkpoint and
    starts afresh otherwise (what `dvc repro` uses, so an interrupted pipeline picks up where
    it stopped).

    checkpoints (deep methods): a shdh.checkpoint_store.FitCheckpoints that keeps the training
    files in an object store, so that a fit on a disk that does not outlive it (a pod) resumes
    from the store; None keeps them in the work folder only.
    """
    if resume not in RESUME_MODES:
        raise ConfigError(f"--resume: expected one of {RESUME_MODES}, got '{resume}'")
    cls = get_hasher_class(plan.method)
    params = dict(plan.params)
    if plan.deep:  # an explicit cuda without a usable GPU stops before any work
        resolve_device(LoopSettings.of(params.get("loop")).device)
        params["work_dir"] = str(plan.out_dir / WORK_DIR)
    X, pairs = training_inputs(
        cls,
        Path(prepared_dir),
        Path(smatrix_path),
        Path(features_path) if features_path else None,
        plan.n_train,
    )
    hasher = cls(n_bits=plan.bits, seed=plan.seed, **params)
    log.info("%s: fitting on %d items", plan.name, len(X))
    started = _started(plan, hasher, X, pairs, resume, checkpoints)
    run_id = None
    if plan.deep and resume != "never":
        run_id = tracking.load_run_ref(plan.out_dir / RUN_REF, parent_run_id)
    # A run reopened after an interruption already has its params.
    logged = None if run_id else _run_params(plan, params, len(X), hasher_segments(hasher, pairs))
    with tracking.run(
        run_name=tracking.child_run_name(plan.method, plan.bits, plan.seed),
        params=logged,
        tags={"method": plan.method, "bits": str(plan.bits), **started, **(tags or {})},
        run_id=run_id,
        parent_run_id=parent_run_id,
    ) as active:
        seconds = _fit_and_save(plan, hasher, X, pairs, active, resume, progress, checkpoints)
    _write_record(plan, seconds, len(X), started)
    log.info("%s: fitted in %.1f s, saved to %s", plan.name, seconds, plan.out_dir)
    return plan.out_dir


def _write_record(plan: Fit, seconds: float, n_train: int, started: dict[str, str]) -> None:
    """fit.json: what was fitted, on how many items, in how long, and where it started from."""
    record = {
        "method": plan.method,
        "bits": plan.bits,
        "own_seed": plan.own_seed,
        "seed": plan.seed,
        "fit_seconds": round(seconds, 3),
        "n_train_items": n_train,
        **started,
    }
    atomic_write_text(plan.out_dir / FIT_RECORD, json.dumps(record, indent=2) + "\n")


def _run_params(plan: Fit, params: dict[str, Any], n_train: int, segments: Any) -> dict[str, Any]:
    """The params of a fit's MLflow run: its settings, what it is, and what it trained on."""
    return {
        **_logged_params(params),
        "method": plan.method,
        "bits": plan.bits,
        "seed": plan.seed,
        "n_train_items": n_train,
        "segment_sizes": segments,
    }


def _logged_params(params: dict[str, Any]) -> dict[str, Any]:
    """A fit's parameters as its MLflow run shows them: the loop and loss settings by their own
    names (epochs, width, lr; alpha, eta, reduction), beside the method's, so that runs of
    every method share one column per setting in the UI, named as in params.yaml."""
    flat = {k: v for k, v in flat_objective(params).items() if k not in ("loop", "work_dir")}
    if "loop" in params:
        flat = {**dataclasses.asdict(params["loop"]), **flat}
    return tracking.flatten(flat)


def _started(
    plan: Fit, hasher: Hasher, X: np.ndarray, pairs: PairSimilarity, resume: str, checkpoints: Any
) -> dict[str, str]:
    """Where a resumed deep fit starts from: its checkpoint in the object store, else a
    sibling's training (_share_checkpoint). Returns fit.json's and the MLflow tags' entry."""
    if not plan.deep or resume == "never":
        return {}
    if checkpoints is not None:
        checkpoints.restore(hasher, X, pairs, plan.out_dir)
    shared_from = _share_checkpoint(hasher, X, pairs, plan.out_dir)
    return {"checkpoint_from": shared_from} if shared_from else {}


def _fit_and_save(
    plan: Fit,
    hasher: Hasher,
    X: np.ndarray,
    pairs: PairSimilarity,
    active: Any,
    resume: str,
    progress: bool,
    checkpoints: Any,
) -> float:
    """The fit itself, inside its MLflow run; returns its seconds."""
    out_dir = plan.out_dir
    out_dir.mkdir(parents=True, exist_ok=True)
    tracking.save_run_ref(out_dir / RUN_REF, active)
    start = time.perf_counter()
    if plan.deep:
        _fit_deep(hasher, X, pairs, resume, progress, out_dir, checkpoints)
    else:
        hasher.fit(X, pairs)
    seconds = time.perf_counter() - start
    hasher.save(out_dir / HASHER_DIR)
    tracking.log_metrics({"fit_seconds": seconds})
    if plan.deep:
        tracking.log_artifact(out_dir / WORK_DIR / "checkpoint.pt", "checkpoint")
        # The encoder as an MLflow model (images -> packed codes), servable and registrable.
        tracking.log_encoder(out_dir / HASHER_DIR, X[:ENCODER_EXAMPLE_ITEMS])
        atomic_write_text(out_dir / "history.json", json.dumps(hasher.history_, indent=2) + "\n")
    return seconds


def _fit_deep(
    hasher: Hasher,
    X: np.ndarray,
    pairs: PairSimilarity,
    resume: str,
    progress: bool,
    out_dir: Path,
    checkpoints: Any,
) -> None:
    """hasher.fit with each epoch logged, and uploaded to the checkpoint store if there is one."""
    on_epoch = _epoch_logger(out_dir.name, hasher.loop.epochs)
    syncing = (
        contextlib.nullcontext(on_epoch)
        if checkpoints is None
        else checkpoints.syncing(hasher, out_dir, on_epoch)
    )
    with syncing as on_epoch:
        hasher.fit(X, pairs, resume=resume, progress=bars(progress), on_epoch=on_epoch)


def _share_checkpoint(
    hasher: Hasher, X: np.ndarray, pairs: PairSimilarity, out_dir: Path
) -> str | None:
    """Start this fit from the finished (or unfinished) training of the same method at another
    code length, when the length does not change that training (the classifier oracle):
    hasher.start_from_sibling, over the sibling fits' work folders. Returns the sibling's run
    name, or None."""
    siblings = sorted(p for p in out_dir.parent.glob("*") if p.is_dir() and p != out_dir)
    found = hasher.start_from_sibling(
        out_dir / WORK_DIR, [s / WORK_DIR for s in siblings], X, pairs
    )
    return None if found is None else found.parent.name


def hasher_segments(hasher: Hasher, pairs: PairSimilarity) -> list[int]:
    """The code layout a hasher will have, known before fitting (for the run's params)."""
    if getattr(hasher, "layout", None) is None:
        return [hasher.n_bits]
    from shdh.hierarchy import segment_sizes

    return segment_sizes(hasher.n_bits, pairs.ancestors.shape[1], hasher.layout)


def _epoch_logger(name: str, epochs: int):
    def on_epoch(entry: dict[str, Any]) -> None:
        log.info(
            "%s epoch %d/%d: loss %.4f, %.0f img/s, |z| %.2f, %.1f%% bits flipped",
            name,
            entry["epoch"],
            epochs,
            entry["loss"],
            entry["images_per_sec"],
            entry["mean_abs_z"],
            100 * entry["flip_fraction"],
        )
        tracking.log_metrics(
            {k: v for k, v in entry.items() if k != "epoch"}, step=int(entry["epoch"])
        )

    return on_epoch
