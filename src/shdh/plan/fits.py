"""The run plan's vocabulary: what a planned fit is, what it is called and where its files live.

shdh.plan.all_methods decides which fits a run has and makes them. The steps that train, checkpoint
and score a fit, the Kubeflow glue and the offsite trainer on a bare GPU machine only read them, so
this part of the plan sits below all of them and needs nothing beyond the standard library.

One name per fit, METHOD-BITS[-seedS] (fit_name): its model folder, its codes file, its record
in a bundle's output, its MLflow run and its place in the checkpoint store. The seed is in the
name when the settings list seeds (shdh.plan.fit_grid.section_seeds), the one case in which two
fits of a run differ by their seed alone; the MLflow runs are also tagged with the seed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

# Inside a model folder models_root/METHOD/NAME:
HASHER_DIR = "hasher"  # the fitted hasher: params.json + state.npz
FIT_RECORD = "fit.json"  # what was fitted, on what, in how long
RUN_REF = "mlflow_run.json"  # the fit's MLflow run, reopened to add its scores
WORK_DIR = "work"  # a deep fit's checkpoint and the record of what it was trained with
HISTORY = "history.json"  # a deep fit's epochs: losses, learning rate, timings
# All but hasher/ differ from run to run for the same model: .dvcignore keeps them out of its
# DVC hash, so that an identical fit leaves dvc.lock as it was.


def fit_name(method: str, bits: int, own_seed: int | None = None) -> str:
    """METHOD-BITS, or METHOD-BITS-seedS for one of several fits that differ only by seed."""
    return f"{method}-{bits}" if own_seed is None else f"{method}-{bits}-seed{own_seed}"


def model_dir(models_root: str | Path, method: str, bits: int, own_seed: int | None = None) -> Path:
    """models_root/METHOD/NAME: one folder per method (a DVC stage's output), one per code
    length (and seed) inside it, self-describing when copied out on its own."""
    return Path(models_root) / method / fit_name(method, bits, own_seed)


def fit_seed(seed: int, own_seed: int | None) -> int:
    """The seed a fit actually uses: its own (one of `seeds`), else the master seed. Training,
    the random floor and metrics_by_seed.json all key a fit by it."""
    return seed if own_seed is None else own_seed


@dataclass(frozen=True)
class Fit:
    """One fit of a run: a method at a code length with one seed, where it lives, and the
    method's constructor arguments (shdh.plan.all_methods makes these from the settings)."""

    method: str
    bits: int
    seed: int  # the seed the fit uses: its own, else the master seed
    own_seed: int | None  # set when the settings list seeds: the fit is named with it
    out_dir: Path  # the model folder, models_root/METHOD/NAME
    params: dict[str, Any]  # the method's constructor arguments (hyper-parameters)
    n_train: int | None = None  # the first n of the seeded training pool; None: all of it

    @property
    def name(self) -> str:
        return fit_name(self.method, self.bits, self.own_seed)

    @property
    def hasher_dir(self) -> Path:
        return self.out_dir / HASHER_DIR

    @property
    def record(self) -> Path:
        return self.out_dir / FIT_RECORD

    @property
    def run_ref(self) -> Path:
        return self.out_dir / RUN_REF

    @property
    def work_dir(self) -> Path:
        return self.out_dir / WORK_DIR

    def sibling_work_dirs(self) -> list[Path]:
        """The work folders of the method's other fits under the same root, in name order:
        the trainings this one may continue when its code length does not change them."""
        folders = self.out_dir.parent.glob("*") if self.out_dir.parent.is_dir() else []
        return [p / WORK_DIR for p in sorted(folders) if p.is_dir() and p != self.out_dir]


def make_fit(
    method: str,
    bits: int,
    own_seed: int | None,
    *,
    seed: int,
    models_root: str | Path,
    params: dict[str, Any],
    n_train: int | None = None,
) -> Fit:
    """The fit of `method` at `bits` with `own_seed` (None: the master seed `seed`) and the
    constructor arguments `params`, stored under models_root/METHOD/NAME."""
    return Fit(
        method=method,
        bits=int(bits),
        seed=fit_seed(seed, own_seed),
        own_seed=own_seed,
        out_dir=model_dir(models_root, method, bits, own_seed),
        params=params,
        n_train=n_train,
    )
