"""The run plan without the deep methods: what every fit is called, which seed it uses and
where it lives, and the shallow methods' settings and code lengths (the `baselines` section).

shdh.plan is the whole plan, the one every front door reads: it adds the deep methods to this
part (their settings objects, and the registry that names them, which loads their code).
`shdh baselines` reads this part alone, so that the DVC stage fitting the shallow methods does
not depend on the deep methods' code.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from shdh.errors import ConfigError
from shdh.hashers.shallow import shallow_hasher_class
from shdh.steps.fit import Fit, run_name


def model_dir(models_dir: str | Path, method: str, bits: int, seed: int | None = None) -> Path:
    """models_dir/METHOD/METHOD-BITS[-seedS]: one folder per method (a DVC stage's output), one
    per code length (and seed) inside it (self-describing when copied out on its own)."""
    return Path(models_dir) / method / run_name(method, bits, seed)


def section_seeds(section: dict[str, Any]) -> list[int | None]:
    """The seeds a section's methods are fitted with: `seeds: null` is one fit with the master
    seed, named without it; a list is one fit per seed, each named with its seed, so the tables
    can report the mean and spread. The split and the S-matrix sample stay the master seed's:
    the seeds vary initialisation, sampling and shuffling, not the data."""
    seeds = section.get("seeds")
    if seeds is None:
        return [None]
    if (
        not isinstance(seeds, list)
        or not seeds
        or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds)
        or len(set(seeds)) != len(seeds)
    ):
        raise ConfigError(
            f"params.yaml: seeds: expected null or a list of distinct non-negative ints, "
            f"got {seeds!r}"
        )
    return list(seeds)


def fit_seed(seed: int, own_seed: int | None) -> int:
    """The seed a fit actually uses: its own (one of `seeds`), else the master seed. Training,
    the random floor and metrics_by_seed.json all key a fit by it."""
    return seed if own_seed is None else own_seed


def make_fit(
    method: str,
    bits: int,
    own_seed: int | None,
    *,
    seed: int,
    models_root: str | Path,
    params: dict[str, Any],
    n_train: int | None,
) -> Fit:
    """The fit of `method` at `bits` with `own_seed` (None: the master seed `seed`) and the
    constructor arguments `params`, stored under models_root/METHOD/METHOD-BITS[-seedS]."""
    return Fit(
        method=method,
        bits=int(bits),
        seed=fit_seed(seed, own_seed),
        own_seed=own_seed,
        name=run_name(method, bits, own_seed),
        out_dir=model_dir(models_root, method, bits, own_seed),
        params=params,
        n_train=n_train,
    )


def constructor_keys(cls: type) -> set[str]:
    """The settings a hasher class takes by name: its keyword-only constructor arguments, less
    those the plan fills in itself (the code length, the seed, a deep method's work folder and
    settings objects)."""
    return {
        p.name
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    } - {"n_bits", "seed", "work_dir", "loop", "objective"}


def own_settings(section: dict[str, Any], method: str) -> dict[str, Any]:
    """A method's own sub-mapping of its section (`baselines.ksh`, `train.shdh`); {} if none."""
    own = section.get(method) or {}
    if not isinstance(own, dict):
        raise ConfigError(f"params.yaml: '{method}' settings must be a mapping, got {own!r}")
    return own


def shallow_method_params(section: dict[str, Any], method: str) -> dict[str, Any]:
    """A shallow method's constructor arguments: its sub-mapping of `baselines`, whose keys the
    method must take (a typo is refused by name, never silently ignored)."""
    own = own_settings(section, method)
    unknown = sorted(set(own) - constructor_keys(shallow_hasher_class(method)))
    if unknown:
        raise ConfigError(f"params.yaml: {method}: unknown settings {unknown}")
    return dict(own)


def shallow_method_bits(params: dict[str, Any], method: str) -> list[int]:
    """The code lengths params.yaml asks a shallow method to run at: baselines.bits, for KMH
    only those its subspaces divide (as in the paper's table)."""
    from shdh.hashers.kmh import KMH

    baselines = params.get("baselines") or {}
    kmh_bits = (baselines.get("kmh") or {}).get("bits_per_subspace", 4)
    return [b for b in baselines.get("bits", []) if method != "kmh" or KMH.supports(b, kmh_bits)]


def shallow_models_root(params: dict[str, Any]) -> Path:
    """Where the shallow methods' model folders live: baselines.models_dir (one DVC output for
    all of them)."""
    return Path(params["baselines"]["models_dir"])


def shallow_fit_plan(
    section: dict[str, Any],
    method: str,
    bits: int,
    own_seed: int | None,
    *,
    seed: int,
    models_root: str | Path,
) -> Fit:
    """shdh.plan.fit_plan for a shallow method, from the `baselines` section."""
    return make_fit(
        method,
        bits,
        own_seed,
        seed=seed,
        models_root=models_root,
        params=shallow_method_params(section, method),
        n_train=section.get("n_train"),
    )
