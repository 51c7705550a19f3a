"""The fit step of the deep methods (SHDH, DPSH, the classifier oracle): train one network at
one code length on the uint8 images of the training pool, tracked in MLflow.

Beyond what every fit shares (shdh.steps.fit), a deep fit checkpoints every epoch and can resume
(training.RESUME_MODES), logs each epoch's loss and speed, keeps its checkpoint and history, and
logs the encoder as an MLflow model (shdh.encoder_model).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from shdh import tracking
from shdh.atomic import atomic_write_text
from shdh.devices import resolve_device
from shdh.encoder_model import log_encoder
from shdh.errors import ConfigError
from shdh.hashers import get_hasher_class
from shdh.hashers.base import Hasher
from shdh.hashers.supervision import PairSimilarity
from shdh.loop import LoopSettings
from shdh.losses import flat_objective
from shdh.progress import bars
from shdh.steps.fit import (
    HASHER_DIR,
    RUN_REF,
    WORK_DIR,
    Fit,
    hasher_segments,
    run_params,
    save_fitted,
    tracked_run,
    training_pool,
    write_record,
)
from shdh.training import RESUME_MODES

log = logging.getLogger(__name__)

ENCODER_EXAMPLE_ITEMS = 2  # training images stored with a logged encoder as its input example


def training_inputs(
    cls: type[Hasher], prepared_dir: Path, smatrix_path: Path, n_train: int | None
) -> tuple[np.ndarray, PairSimilarity]:
    """(X, pairs) for the training pool: its images and the S-matrix's pair labels."""
    ds, train_idx, pairs = training_pool(cls, prepared_dir, smatrix_path, n_train)
    return np.asarray(ds.images[train_idx]), pairs


def fit(
    plan: Fit,
    *,
    prepared_dir: str | Path,
    smatrix_path: str | Path,
    resume: str = "never",
    progress: bool = True,
    tags: dict[str, str] | None = None,
    parent_run_id: str | None = None,
    checkpoints: Any = None,
) -> Path:
    """Fit `plan` (a deep method) and save it in plan.out_dir: the hasher, fit.json, the
    checkpoint, history.json and the MLflow run reference.

    resume (training.RESUME_MODES): "auto" continues a matching checkpoint and starts afresh
    otherwise (what `dvc repro` uses, so an interrupted pipeline picks up where it stopped).

    checkpoints: a shdh.checkpoint_store.FitCheckpoints that keeps the training files in an
    object store, so that a fit on a disk that does not outlive it (a pod) resumes from the
    store; None keeps them in the work folder only.
    """
    if resume not in RESUME_MODES:
        raise ConfigError(f"--resume: expected one of {RESUME_MODES}, got '{resume}'")
    cls = get_hasher_class(plan.method)
    if cls.input_kind != "images":
        raise ConfigError(f"{plan.method}: not a deep method (shdh.steps.fit_shallow fits it)")
    params = dict(plan.params)
    # An explicit cuda without a usable GPU stops before any work.
    resolve_device(LoopSettings.of(params.get("loop")).device)
    params["work_dir"] = str(plan.out_dir / WORK_DIR)
    X, pairs = training_inputs(cls, Path(prepared_dir), Path(smatrix_path), plan.n_train)
    hasher = cls(n_bits=plan.bits, seed=plan.seed, **params)
    log.info("%s: fitting on %d items", plan.name, len(X))
    started = _started(plan, hasher, X, pairs, resume, checkpoints)
    run_id = None
    if resume != "never":
        run_id = tracking.load_run_ref(plan.out_dir / RUN_REF, parent_run_id)
    # A run reopened after an interruption already has its params.
    logged = None
    if not run_id:
        logged = run_params(plan, _logged_params(params), len(X), hasher_segments(hasher, pairs))
    with tracked_run(
        plan,
        params=logged,
        started=started,
        tags=tags,
        run_id=run_id,
        parent_run_id=parent_run_id,
    ):
        start = time.perf_counter()
        _fit_deep(hasher, X, pairs, resume, progress, plan.out_dir, checkpoints)
        seconds = time.perf_counter() - start
        save_fitted(plan, hasher, seconds)
        _log_training(plan.out_dir, hasher, X)
    write_record(plan, hasher, seconds, len(X), started)
    log.info("%s: fitted in %.1f s, saved to %s", plan.name, seconds, plan.out_dir)
    return plan.out_dir


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
    """Where a resumed fit starts from: its checkpoint in the object store, else a sibling's
    training (_share_checkpoint). Returns fit.json's and the MLflow tags' entry."""
    if resume == "never":
        return {}
    if checkpoints is not None:
        checkpoints.restore(hasher, X, pairs, plan.out_dir)
    shared_from = _share_checkpoint(hasher, X, pairs, plan.out_dir)
    return {"checkpoint_from": shared_from} if shared_from else {}


def _log_training(out_dir: Path, hasher: Hasher, X: np.ndarray) -> None:
    """The training's own record on the active run and beside the model: the checkpoint, the
    encoder as an MLflow model (images -> packed codes, servable and registrable) and the
    per-epoch history."""
    tracking.log_artifact(out_dir / WORK_DIR / "checkpoint.pt", "checkpoint")
    log_encoder(out_dir / HASHER_DIR, X[:ENCODER_EXAMPLE_ITEMS])
    atomic_write_text(out_dir / "history.json", json.dumps(hasher.history_, indent=2) + "\n")


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
        tracking.log_metrics(epoch_metrics(entry), step=int(entry["epoch"]))

    return on_epoch


# The loss terms of history.json as MLflow names them: `e1` and `e2` are also the names of the
# settings that choose those terms (params), and one name for a param and a metric makes the
# comparison view show two unrelated rows under it.
LOSS_TERMS = {"e1": "loss_e1", "e2": "loss_e2"}


def epoch_metrics(entry: dict[str, Any]) -> dict[str, float]:
    """One epoch of history.json as the run's metrics: the epoch is the step, not a metric."""
    return {LOSS_TERMS.get(k, k): v for k, v in entry.items() if k != "epoch"}
