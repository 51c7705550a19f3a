"""The fit step of the shallow methods (ITQ, KMH, KSH, LFH, COSDISH, ...): one method at one
code length on the GIST features of the training pool, tracked in MLflow.

It loads the shallow method it fits, never the deep methods' code; the fit itself is the
runner's (shdh.steps.fit.run_fit).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from shdh.hashers import hasher_class
from shdh.hashers.base import Hasher
from shdh.hashers.method_catalogue import method
from shdh.hashers.supervision import PairSimilarity
from shdh.plan.fits import Fit
from shdh.runtime.errors import ConfigError
from shdh.steps.fit import Tracked, run_fit, training_pool
from shdh.steps.split_inputs import load_features
from shdh.tracking import mlflow_runs


def training_inputs(
    cls: type[Hasher],
    prepared_dir: Path,
    smatrix_path: Path,
    features_path: Path | None,
    n_train: int | None,
) -> tuple[np.ndarray, PairSimilarity]:
    """(X, pairs) for the training pool: its GIST rows and the S-matrix's pair labels."""
    if features_path is None:
        raise ConfigError(f"{cls.name}: needs GIST features (run the features step first)")
    ds, train_idx, pairs = training_pool(cls, prepared_dir, smatrix_path, n_train)
    return load_features(features_path, len(ds.ids))[train_idx], pairs


def fit(
    plan: Fit,
    *,
    prepared_dir: str | Path,
    smatrix_path: str | Path,
    features_path: str | Path | None = None,
    tags: dict[str, str] | None = None,
    parent_run_id: str | None = None,
) -> Path:
    """Fit `plan` (a shallow method) and save it in plan.out_dir: the hasher, fit.json and the
    MLflow run reference."""
    if method(plan.method).deep:
        raise ConfigError(f"{plan.method}: not a shallow method (shdh.steps.fit_deep fits it)")
    cls = hasher_class(plan.method)
    X, pairs = training_inputs(
        cls,
        Path(prepared_dir),
        Path(smatrix_path),
        Path(features_path) if features_path else None,
        plan.n_train,
    )
    settings = mlflow_runs.flatten(dict(plan.params))
    run_fit(plan, cls, X, pairs, tracked=Tracked(settings, tags, parent_run_id))
    return plan.out_dir
