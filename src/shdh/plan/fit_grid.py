"""Which fits a section of the settings asks for, in the plan's order, and how each is made.

A section (`train` for the deep methods, `baselines` for the shallow ones) names methods, code
lengths and seeds; `runs` lists them as (method, bits, own seed), `fit_plan` turns one into a
`Fit` (shdh.plan.fits) with the method's constructor arguments, and `section_fits` does both for
a section. The arguments come from the `method_params` the caller gives:
shdh.plan.shallow.shallow_method_params for the shallow methods alone (the `baselines` stage,
which must not depend on the deep methods' code), shdh.plan.all_methods.method_params for any.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shdh.plan.fits import Fit, make_fit
from shdh.runtime.errors import ConfigError

Run = tuple[str, int, int | None]  # (method, bits, own seed): one fit, before it is made
# (section, method) -> the method's constructor arguments
MethodParams = Callable[[dict[str, Any], str], dict[str, Any]]


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


def runs(
    section: dict[str, Any],
    methods: list[str],
    bits: list[int],
    bits_of: Callable[[str], list[int]] | None = None,
    seeds: list[int] | None = None,
) -> list[Run]:
    """(method, bits, own seed) of every fit of `methods` at `bits` (those of bits_of(method)
    where it is given: KMH's lengths) with each of the section's seeds (section_seeds) unless
    `seeds` names them: every method at the first length, then the next (the plan's order,
    the one the score step scores and the Kubeflow DAG chains them in)."""
    own_seeds = section_seeds(section) if seeds is None else list(seeds)
    return [
        (method, int(b), own_seed)
        for b in bits
        for method in methods
        if bits_of is None or b in bits_of(method)
        for own_seed in own_seeds
    ]


def fit_plan(
    section: dict[str, Any],
    method: str,
    bits: int,
    own_seed: int | None,
    *,
    seed: int,
    models_root: str | Path,
    method_params: MethodParams,
) -> Fit:
    """The fit of `method` at `bits` with `own_seed` (None: the master seed `seed`), with the
    constructor arguments method_params(section, method), stored under models_root/METHOD/NAME."""
    return make_fit(
        method,
        bits,
        own_seed,
        seed=seed,
        models_root=models_root,
        params=method_params(section, method),
        n_train=section.get("n_train"),
    )


def section_fits(
    section: dict[str, Any],
    methods: list[str],
    bits: list[int],
    *,
    seed: int,
    models_root: str | Path,
    bits_of: Callable[[str], list[int]] | None = None,
    seeds: list[int] | None = None,
    method_params: MethodParams,
) -> list[Fit]:
    """The fits of runs(section, methods, bits, bits_of, seeds), made by fit_plan."""
    return [
        fit_plan(
            section,
            method,
            b,
            own_seed,
            seed=seed,
            models_root=models_root,
            method_params=method_params,
        )
        for method, b, own_seed in runs(section, methods, bits, bits_of, seeds)
    ]
