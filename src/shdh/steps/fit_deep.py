"""The fit step of the deep methods (SHDH, DPSH, the classifier oracle): train one network at
one code length on the uint8 images of the training pool, tracked in MLflow.

The fit itself is the runner's (shdh.steps.fit.run_fit): checkpoints every epoch, resume
(training.RESUME_MODES), each epoch's loss and speed. What a deep fit adds to its MLflow run is
here: its settings objects by their own names, the checkpoint and history, and the encoder as an
MLflow model (shdh.tracking.encoder_model).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from shdh.data.shards import select_rows
from shdh.hashers import hasher_class
from shdh.hashers.base import Hasher
from shdh.hashers.deep_record import flat_params
from shdh.hashers.supervision import PairSimilarity
from shdh.plan.fits import HISTORY, Fit
from shdh.runtime.atomic import atomic_write_text
from shdh.runtime.devices import resolve_device
from shdh.runtime.errors import ConfigError
from shdh.steps.fit import Fitted, Tracked, Training, run_fit, training_pool
from shdh.steps.weights import fetch_weights
from shdh.tracking import mlflow_runs
from shdh.tracking.encoder_model import log_encoder
from shdh.training import convergence
from shdh.training.checkpoint import RESUME_MODES
from shdh.training.distributed import World
from shdh.training.loop import check_weights
from shdh.training.loop_settings import LoopSettings

log = logging.getLogger(__name__)

ENCODER_EXAMPLE_ITEMS = 2  # training images stored with a logged encoder as its input example


def training_inputs(
    cls: type[Hasher], prepared_dir: Path, smatrix_path: Path, n_train: int | None
) -> tuple[np.ndarray, PairSimilarity]:
    """(X, pairs) for the training pool: its images and the S-matrix's pair labels. Images in
    shards are not gathered: X reads the pool's rows batch by batch (select_rows)."""
    ds, train_idx, pairs = training_pool(cls, prepared_dir, smatrix_path, n_train)
    return select_rows(ds.images, train_idx), pairs


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

    checkpoints: a shdh.tracking.checkpoint_sync.FitCheckpoints that keeps the training files in an
    object store, so that a fit on a disk that does not outlive it (a pod) resumes from the
    store; None keeps them in the work folder only.
    """
    if resume not in RESUME_MODES:
        raise ConfigError(f"--resume: expected one of {RESUME_MODES}, got '{resume}'")
    cls = hasher_class(plan.method)
    if cls.input_kind != "images":
        raise ConfigError(f"{plan.method}: not a deep method (shdh.steps.fit_shallow fits it)")
    # An explicit cuda without a usable GPU stops before any work.
    loop = LoopSettings.of(plan.params.get("loop"))
    resolve_device(loop.device)
    fetch_weights(loop)  # remote pretrained weights, before any work that needs them
    X, pairs = training_inputs(cls, Path(prepared_dir), Path(smatrix_path), plan.n_train)
    check_weights(loop, X)  # before the fit's MLflow run and work folder change
    # Under torchrun every rank trains, restoring the stored checkpoint into its own work
    # folder; rank 0 alone keeps the fit (model folder, MLflow run, uploads).
    main = World.from_env().main
    run_fit(
        plan,
        cls,
        X,
        pairs,
        training=Training(resume=resume, progress=progress, checkpoints=checkpoints),
        tracked=(
            Tracked(logged_params(plan.params), tags, parent_run_id, keep=_log_training)
            if main
            else None
        ),
    )
    return plan.out_dir


def logged_params(params: dict[str, Any]) -> dict[str, Any]:
    """A fit's parameters as its MLflow run shows them: the loop and loss settings by their own
    names (epochs, width, lr; alpha, eta, reduction), beside the method's, so that runs of
    every method share one column per setting in the UI, named as in params.yaml."""
    flat = {k: v for k, v in flat_params(params).items() if k != "work_dir"}
    return mlflow_runs.flatten({**flat.pop("loop", {}), **flat})


def _log_training(fitted: Fitted, X: np.ndarray) -> None:
    """The training's own record on the active run and beside the model: the checkpoint, the
    encoder as an MLflow model (images -> packed codes, servable and registrable), the
    per-epoch history and, for a plateau fit, how it ended (a tag, so that the runs table shows
    which fits the epoch cap cut short)."""
    fit = fitted.fit
    loop = fitted.hasher.loop
    mlflow_runs.set_tags(
        convergence.ended_by_tag(fitted.hasher.history_, loop.patience, loop.min_delta)
    )
    sha = fitted.hasher.network_record()["pretrained_sha256"]
    mlflow_runs.set_tags(
        {"backbone": loop.backbone, "pretrained_sha256": sha or "none (from scratch)"}
    )
    mlflow_runs.log_artifact(fit.work_dir / "checkpoint.pt", "checkpoint")
    log_encoder(fit.hasher_dir, X[:ENCODER_EXAMPLE_ITEMS])
    history = json.dumps(fitted.hasher.history_, indent=2) + "\n"
    atomic_write_text(fit.out_dir / HISTORY, history)
