"""The fit runner: every fit, deep or shallow, whichever front door asked for it, runs here.

A fit (shdh.plan.fits.Fit, made by the run plan) is trained the same way by the DVC stages (`shdh
train`, `shdh baselines`), the Kubeflow components and the offsite trainer on a bare GPU machine
(shdh.bundle): on the training pool (a seeded prefix of the database order) with the pair labels
of the S-matrix, in the mode the method asks for (training_items), through run_fit. A deep fit
keeps its checkpoint in the fit's work folder and can resume it, or continue the finished
training of the method at another code length when the length does not change it (the
classifier oracle); every epoch is logged.

What differs is what is kept. The pipeline keeps a model folder and an MLflow run (`Tracked`:
the hasher, fit.json, the run reference; the run's params, tags and per-epoch metrics); the
bundle keeps codes and a record of its own. The inputs differ too: the deep methods
(shdh.steps.fit_deep) train on uint8 images, the shallow ones (shdh.steps.fit_shallow) on GIST
features; each of those loads only its own methods' code, so the DVC stage that fits the shallow
methods does not depend on the training loop, nor a deep one on the GIST features.

This module imports nothing a bare GPU machine lacks: MLflow is imported by
shdh.tracking.mlflow_runs inside the calls a tracked fit makes.
"""

from __future__ import annotations

import contextlib
import json
import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shdh.data.splits import training_subset
from shdh.hashers.base import Hasher
from shdh.hashers.supervision import PairSimilarity
from shdh.plan.fits import Fit
from shdh.runtime import instruction_set, source_fingerprint
from shdh.runtime.atomic import atomic_write_text
from shdh.runtime.progress import bars
from shdh.tracking import mlflow_runs

log = logging.getLogger(__name__)

OnEpoch = Callable[[dict[str, Any]], None]


@dataclass(frozen=True)
class Training:
    """How a deep fit trains, beyond its settings: resume (training.RESUME_MODES; "auto"
    continues a matching checkpoint and starts afresh otherwise), a progress bar, and a
    shdh.tracking.checkpoint_sync.FitCheckpoints that keeps the training files in an object store,
    so that a fit on a disk that does not outlive it (a pod) resumes from there. A shallow fit
    ignores it."""

    resume: str = "never"
    progress: bool = False
    checkpoints: Any = None


@dataclass(frozen=True)
class Tracked:
    """A fit kept as the pipeline keeps it: in its model folder (the hasher, fit.json, the
    MLflow run reference) and in an MLflow run under the pipeline's parent run, whose params are
    `settings` (flat, named as in params.yaml) and what the fit trained on. `keep` adds what
    else the run holds (a deep fit's checkpoint, encoder and history) while it is open."""

    settings: dict[str, Any]
    tags: dict[str, str] | None = None
    parent_run_id: str | None = None
    keep: Callable[[Fitted, np.ndarray], None] | None = None


@dataclass
class Fitted:
    """A trained fit: its hasher, its training time and size, and where it started from."""

    fit: Fit
    hasher: Hasher
    seconds: float
    n_train: int
    started: dict[str, str] = field(default_factory=dict)  # {"checkpoint_from": sibling's name}

    @property
    def checkpoint_from(self) -> str | None:
        return self.started.get("checkpoint_from")


def training_items(
    cls: type[Hasher],
    split: Any,
    ancestors: np.ndarray,
    weights: np.ndarray,
    n_train: int | None,
) -> tuple[np.ndarray, PairSimilarity]:
    """(indices of the training pool, their pair labels in the mode the method asks for): the
    first n_train items of the split's seeded database order, sorted."""
    train_idx = np.sort(training_subset(split, n_train))
    return train_idx, PairSimilarity(ancestors[train_idx], weights, cls.supervision or "label")


def training_pool(
    cls: type[Hasher], prepared_dir: Path, smatrix_path: Path, n_train: int | None
) -> tuple[Any, np.ndarray, PairSimilarity]:
    """(dataset, indices of the training pool, their pair labels) of a prepared dataset and its
    S-matrix; the caller picks its input rows (images or GIST) with the indices."""
    from shdh.steps.prepare import load_prepared
    from shdh.steps.smatrix import load_smatrix

    ds, split = load_prepared(prepared_dir)
    s = load_smatrix(smatrix_path)
    train_idx, pairs = training_items(cls, split, s.ancestors, s.weights, n_train)
    return ds, train_idx, pairs


def _is_deep(cls: type[Hasher]) -> bool:
    """Deep methods train a network on images, in a work folder, epoch by epoch."""
    return cls.input_kind == "images"


def run_fit(
    fit: Fit,
    cls: type[Hasher],
    X: np.ndarray,
    pairs: PairSimilarity,
    *,
    training: Training = Training(),
    tracked: Tracked | None = None,
) -> Fitted:
    """Train `fit` (a hasher of `cls`) on X with the pair labels `pairs`. With `tracked`, the
    fitted hasher is saved in fit.out_dir with fit.json, inside its MLflow run."""
    params = {**fit.params, "work_dir": str(fit.work_dir)} if _is_deep(cls) else dict(fit.params)
    hasher = cls(n_bits=fit.bits, seed=fit.seed, **params)
    log.info("%s: fitting on %d items", fit.name, len(X))
    started = _started(fit, hasher, X, pairs, training)
    with _run_of(fit, hasher, pairs, len(X), started, training, tracked) as on_epoch:
        start = time.perf_counter()
        if _is_deep(cls):
            _fit_deep(fit, hasher, X, pairs, training, on_epoch)
        else:
            hasher.fit(X, pairs)
        fitted = Fitted(fit, hasher, time.perf_counter() - start, len(X), started)
        if tracked is not None:
            hasher.save(fit.hasher_dir)
            mlflow_runs.log_metrics({"fit_seconds": fitted.seconds})
            if tracked.keep is not None:
                tracked.keep(fitted, X)
    if tracked is not None:
        write_record(fitted)
    log.info("%s: fitted in %.1f s", fit.name, fitted.seconds)
    return fitted


def _started(
    fit: Fit, hasher: Hasher, X: np.ndarray, pairs: PairSimilarity, training: Training
) -> dict[str, str]:
    """Where a resumed deep fit starts from: its checkpoint in the object store, else a
    sibling's training (the same method at another code length, when the length does not change
    the training: hasher.start_from_sibling). Returns fit.json's and the MLflow tags' entry."""
    if training.resume == "never" or not _is_deep(type(hasher)):
        return {}
    if training.checkpoints is not None:
        training.checkpoints.restore(hasher, X, pairs, fit.out_dir)
    found = hasher.start_from_sibling(fit.work_dir, fit.sibling_work_dirs(), X, pairs)
    return {} if found is None else {"checkpoint_from": found.parent.name}


@contextlib.contextmanager
def _run_of(
    fit: Fit,
    hasher: Hasher,
    pairs: PairSimilarity,
    n_train: int,
    started: dict[str, str],
    training: Training,
    tracked: Tracked | None,
) -> Iterator[OnEpoch | None]:
    """The fit's MLflow run when it is tracked (reopened when a resumed fit has one: it already
    has its params), with its reference saved in the model folder; yields the epoch logger.

    A fit that fails leaves the folder's model as it was (the hasher is written whole at the
    end), so the reference to that model's run is put back too: otherwise it would name the
    failed run, which holds neither the model nor its scores."""
    epochs = hasher.loop.epochs if _is_deep(type(hasher)) else 0
    on_epoch = epoch_logger(fit.name, epochs, tracked=tracked is not None)
    if tracked is None:
        yield on_epoch
        return
    run_id = None
    if training.resume != "never":
        run_id = mlflow_runs.load_run_ref(fit.run_ref, tracked.parent_run_id)
    params = None if run_id else run_params(fit, tracked.settings, n_train, hasher, pairs)
    with mlflow_runs.run(
        run_name=fit.name,
        params=params,
        tags={
            **mlflow_runs.method_tags(fit.method, fit.bits, fit.seed),
            **started,
            **(tracked.tags or {}),
        },
        run_id=run_id,
        parent_run_id=tracked.parent_run_id,
    ) as active:
        fit.out_dir.mkdir(parents=True, exist_ok=True)
        previous = fit.run_ref.read_text() if fit.run_ref.is_file() else None
        mlflow_runs.save_run_ref(fit.run_ref, active)
        try:
            yield on_epoch
        except BaseException:
            if previous is not None:
                atomic_write_text(fit.run_ref, previous)
            raise


def _fit_deep(
    fit: Fit,
    hasher: Hasher,
    X: np.ndarray,
    pairs: PairSimilarity,
    training: Training,
    on_epoch: OnEpoch | None,
) -> None:
    """hasher.fit with each epoch logged, and uploaded to the checkpoint store if there is one."""
    syncing = (
        contextlib.nullcontext(on_epoch)
        if training.checkpoints is None
        else training.checkpoints.syncing(hasher, fit.out_dir, on_epoch)
    )
    with syncing as on_epoch:
        hasher.fit(
            X, pairs, resume=training.resume, progress=bars(training.progress), on_epoch=on_epoch
        )


def epoch_logger(name: str, epochs: int, *, tracked: bool) -> OnEpoch:
    """Log each epoch of a deep fit; to its MLflow run too when the fit is tracked."""

    def on_epoch(entry: dict[str, Any]) -> None:
        log.info(
            "%s epoch %d/%d: loss %.4f, %.0f img/s, %.1f s, |z| %.2f, %.1f%% bits flipped",
            name,
            entry["epoch"],
            epochs,
            entry["loss"],
            entry["images_per_sec"],
            entry["seconds"],
            entry["mean_abs_z"],
            100 * entry["flip_fraction"],
        )
        if tracked:
            mlflow_runs.log_metrics(epoch_metrics(entry), step=int(entry["epoch"]))

    return on_epoch


# The loss terms of history.json as MLflow names them: `e1` and `e2` are also the names of the
# settings that choose those terms (params), and one name for a param and a metric makes the
# comparison view show two unrelated rows under it.
LOSS_TERMS = {"e1": "loss_e1", "e2": "loss_e2"}


def epoch_metrics(entry: dict[str, Any]) -> dict[str, float]:
    """One epoch of history.json as the run's metrics: the epoch is the step, not a metric."""
    return {LOSS_TERMS.get(k, k): v for k, v in entry.items() if k != "epoch"}


def write_record(fitted: Fitted) -> None:
    """fit.json: what was fitted, on how many items, in how long, and where it started from;
    the CPU pin it ran under and the code that decided its numbers (docs/reproducibility.md)."""
    fit = fitted.fit
    record = {
        "method": fit.method,
        "bits": fit.bits,
        "own_seed": fit.own_seed,
        "seed": fit.seed,
        "fit_seconds": round(fitted.seconds, 3),
        "n_train_items": fitted.n_train,
        **fitted.started,
        **(fitted.hasher.network_record() if _is_deep(type(fitted.hasher)) else {}),
        **instruction_set.describe(),
        "code": source_fingerprint.fingerprint([type(fitted.hasher).__module__]),
    }
    atomic_write_text(fit.record, json.dumps(record, indent=2) + "\n")


def run_params(
    fit: Fit, settings: dict[str, Any], n_train: int, hasher: Hasher, pairs: PairSimilarity
) -> dict[str, Any]:
    """The params of a fit's MLflow run: its settings (flat, as params.yaml names them), what
    it is, what it trained on, and the code layout it will have."""
    return {
        **settings,
        "method": fit.method,
        "bits": fit.bits,
        "seed": fit.seed,
        "n_train_items": n_train,
        "segment_sizes": hasher_segments(hasher, pairs),
    }


def hasher_segments(hasher: Hasher, pairs: PairSimilarity) -> list[int]:
    """The code layout a hasher will have, known before fitting (for the run's params); a
    layout the tree cannot hold (too few bits for its levels) is refused here, before the fit's
    folder is made."""
    if not _is_deep(type(hasher)):
        return [hasher.n_bits]
    return hasher.code_layout(int(pairs.ancestors.shape[1]))[0]
