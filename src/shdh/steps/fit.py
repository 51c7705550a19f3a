"""The fit step: fit one method at one code length on the training pool, tracked in MLflow.

Every method, deep or shallow, is fitted the same way: on the same training items (a seeded
prefix of the database order), with the same pair labels from the S-matrix artifact (in the
mode the method asks for), leaving the same record (a saved hasher, its fit time, its MLflow
run). This module holds that shared part. What differs is the input and the training: the deep
methods (shdh.steps.fit_deep) train a network on uint8 images, with checkpoints that a rerun
resumes; the shallow ones (shdh.steps.fit_shallow) fit GIST features. Each of the two loads only
its own methods' code, so the DVC stage that fits the shallow methods does not depend on the
training loop, nor a deep one on the GIST features.

Which fits a run asks for, and what each is called, is the run plan's business (shdh.plan makes
the `Fit`s); these steps take one and carry it out.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shdh import code_fingerprint, cpu_pin, tracking
from shdh.atomic import atomic_write_text
from shdh.hashers.base import Hasher
from shdh.hashers.supervision import PairSimilarity

log = logging.getLogger(__name__)

HASHER_DIR = "hasher"  # inside a model folder: params.json + state.npz
RUN_REF = "mlflow_run.json"
FIT_RECORD = "fit.json"
WORK_DIR = "work"  # inside a deep model folder: the checkpoint and its run record


def run_name(method: str, bits: int, seed: int | None = None) -> str:
    """METHOD-BITS, or METHOD-BITS-seedS for one of several fits that differ only by seed: the
    name of the model folder, the MLflow run and the codes file."""
    return f"{method}-{bits}" if seed is None else f"{method}-{bits}-seed{seed}"


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


def training_pool(
    cls: type[Hasher], prepared_dir: Path, smatrix_path: Path, n_train: int | None
) -> tuple[Any, np.ndarray, PairSimilarity]:
    """(dataset, indices of the training pool, their pair labels from the S-matrix, in the
    mode the method asks for); the caller picks its input rows (images or GIST) with them."""
    from shdh.data.splits import training_subset
    from shdh.steps.prepare import load_prepared
    from shdh.steps.smatrix import load_smatrix

    ds, split = load_prepared(prepared_dir)
    s = load_smatrix(smatrix_path)
    train_idx = np.sort(training_subset(split, n_train))
    pairs = PairSimilarity(s.ancestors[train_idx], s.weights, cls.supervision or "label")
    return ds, train_idx, pairs


@contextmanager
def tracked_run(
    plan: Fit,
    *,
    params: dict[str, Any] | None,
    started: dict[str, str],
    tags: dict[str, str] | None,
    run_id: str | None,
    parent_run_id: str | None,
) -> Iterator[Any]:
    """The fit's MLflow run (reopened when run_id is given: it already has its params), with
    its reference saved in the model folder; yields the active run."""
    with tracking.run(
        run_name=tracking.child_run_name(plan.method, plan.bits, plan.seed),
        params=params,
        tags={**tracking.method_tags(plan.method, plan.bits, plan.seed), **started, **(tags or {})},
        run_id=run_id,
        parent_run_id=parent_run_id,
    ) as active:
        plan.out_dir.mkdir(parents=True, exist_ok=True)
        tracking.save_run_ref(plan.out_dir / RUN_REF, active)
        yield active


def save_fitted(plan: Fit, hasher: Hasher, seconds: float) -> None:
    """The fitted hasher in the model folder, and its fit time on the active run."""
    hasher.save(plan.out_dir / HASHER_DIR)
    tracking.log_metrics({"fit_seconds": seconds})


def write_record(
    plan: Fit, hasher: Hasher, seconds: float, n_train: int, started: dict[str, str]
) -> None:
    """fit.json: what was fitted, on how many items, in how long, and where it started from;
    the CPU pin it ran under and the code that decided its numbers (docs/reproducibility.md)."""
    record = {
        "method": plan.method,
        "bits": plan.bits,
        "own_seed": plan.own_seed,
        "seed": plan.seed,
        "fit_seconds": round(seconds, 3),
        "n_train_items": n_train,
        **started,
        **cpu_pin.describe(),
        "code": code_fingerprint.fingerprint([type(hasher).__module__]),
    }
    atomic_write_text(plan.out_dir / FIT_RECORD, json.dumps(record, indent=2) + "\n")


def run_params(plan: Fit, settings: dict[str, Any], n_train: int, segments: Any) -> dict[str, Any]:
    """The params of a fit's MLflow run: its settings (flat, as the method's module logs
    them), what it is, and what it trained on."""
    return {
        **settings,
        "method": plan.method,
        "bits": plan.bits,
        "seed": plan.seed,
        "n_train_items": n_train,
        "segment_sizes": segments,
    }


def hasher_segments(hasher: Hasher, pairs: PairSimilarity) -> list[int]:
    """The code layout a hasher will have, known before fitting (for the run's params)."""
    if getattr(hasher, "layout", None) is None:
        return [hasher.n_bits]
    from shdh.hierarchy import segment_sizes

    return segment_sizes(hasher.n_bits, pairs.ancestors.shape[1], hasher.layout)
