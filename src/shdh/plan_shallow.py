"""The run plan without the deep methods: which fits a section of the settings asks for (runs,
fit_plan), the seeds they use, and the shallow methods' settings and code lengths (the
`baselines` section). What a fit is, what it is called and where it lives is shdh.fits, which
this module re-exports.

shdh.plan is the whole plan, the one every front door reads: it adds the deep methods to this
part (their settings objects, and the registry that names them, which loads their code).
`shdh baselines` reads this part alone, so that the DVC stage fitting the shallow methods does
not depend on the deep methods' code.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path
from typing import Any

from shdh.errors import ConfigError
from shdh.fits import Fit, fit_name, fit_seed, make_fit, model_dir
from shdh.hashers.shallow import shallow_hasher_class

__all__ = [
    "Fit",
    "fit_name",
    "fit_plan",
    "fit_seed",
    "model_dir",
    "runs",
    "section_fits",
    "section_seeds",
    "shallow_method_bits",
    "shallow_method_params",
    "shallow_models_root",
]

Run = tuple[str, int, int | None]  # (method, bits, own seed): one fit, before it is made


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


def shallow_method_params(section: dict[str, Any], method: str) -> dict[str, Any]:
    """A shallow method's constructor arguments: its sub-mapping of `baselines`, whose keys the
    method must take (a typo is refused by name, never silently ignored)."""
    own = own_settings(section, method)
    unknown = sorted(set(own) - constructor_keys(shallow_hasher_class(method)))
    if unknown:
        raise ConfigError(f"params.yaml: {method}: unknown settings {unknown}")
    return dict(own)


def shallow_method_bits(params: dict[str, Any], method: str) -> list[int]:
    """The code lengths params.yaml asks a shallow method to run at: baselines.bits, less those
    the method cannot make with its settings (KMH's that its subspaces do not divide, as in the
    paper's table)."""
    baselines = params.get("baselines") or {}
    cls, own = shallow_hasher_class(method), own_settings(baselines, method)
    return [b for b in baselines.get("bits", []) if cls.supports(b, **own)]


def shallow_models_root(params: dict[str, Any]) -> Path:
    """Where the shallow methods' model folders live: baselines.models_dir (one DVC output for
    all of them)."""
    return Path(params["baselines"]["models_dir"])


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
    section: dict[str, Any] | None,
    method: str,
    bits: int,
    own_seed: int | None,
    *,
    seed: int,
    models_root: str | Path,
    method_params: Callable[[dict[str, Any], str], dict[str, Any]] = shallow_method_params,
) -> Fit:
    """The fit of `method` at `bits` with `own_seed` (None: the master seed `seed`), with the
    constructor arguments method_params(section, method) (a shallow method's by default;
    shdh.plan.fit_plan gives any method's), stored under models_root/METHOD/NAME. Without a
    section, the fit as the score step sees it: where its model is and what it is called."""
    return make_fit(
        method,
        bits,
        own_seed,
        seed=seed,
        models_root=models_root,
        params=method_params(section, method) if section is not None else {},
        n_train=section.get("n_train") if section is not None else None,
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
    method_params: Callable[[dict[str, Any], str], dict[str, Any]] = shallow_method_params,
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
