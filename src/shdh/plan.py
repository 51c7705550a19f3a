"""The run plan: which fits a params file asks for, what each is called and where it lives.

Every front door (the DVC stages through the CLI, the Kubeflow components, the offsite trainer
shdh.bundle) reads the plan from here and hands the library steps the `Fit`s it makes, so that
a fit is named, seeded and stored the same way whoever runs it. Pure functions of the settings:
no I/O, and nothing a bare GPU machine lacks.
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path
from typing import Any

from shdh.errors import ConfigError
from shdh.hashers import get_hasher_class
from shdh.loop import LoopSettings
from shdh.steps.fit import Fit, is_deep, run_name

# Keys of the `train` section that configure the pipeline rather than a method.
PIPELINE_KEYS = ("methods", "bits", "models_dir", "n_train", "seeds")


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


def method_params(section: dict[str, Any], method: str) -> dict[str, Any]:
    """Constructor arguments for `method` from its params.yaml section.

    Deep methods take the backbone and loop settings of `train` as one LoopSettings (their
    `loop`) and their loss settings as one objective (their `objective`: SHDH's alpha, e1, e2
    and target, DPSH's eta; `reduction` is shared), each set key by key, with their own
    sub-mapping (`train.shdh`, `train.oracle`) able to override any shared one; plus their own
    other settings (SHDH's layout, the memory bank). Shallow ones take only their sub-mapping of
    `baselines`. Keys the method does not take are refused by name, so a typo cannot be
    silently ignored.
    """
    cls = get_hasher_class(method)
    accepted = {
        p.name
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    } - {"n_bits", "seed", "work_dir", "loop", "objective"}
    own = section.get(method) or {}
    if not isinstance(own, dict):
        raise ConfigError(f"params.yaml: '{method}' settings must be a mapping, got {own!r}")
    if not is_deep(method):
        unknown = sorted(set(own) - accepted)
        if unknown:
            raise ConfigError(f"params.yaml: {method}: unknown settings {unknown}")
        return dict(own)
    groups = {"loop": LoopSettings, "objective": cls.objective_class()}
    accepted |= {f.name for group in groups.values() for f in dataclasses.fields(group)}
    unknown = sorted(set(own) - accepted)
    if unknown:
        raise ConfigError(f"params.yaml: {method}: unknown settings {unknown}")
    skip = set(PIPELINE_KEYS) | {m for m in section if isinstance(section[m], dict)}
    shared = {k: v for k, v in section.items() if k not in skip}
    strays = sorted(set(shared) - accepted)
    if strays:
        raise ConfigError(f"params.yaml: train: settings {strays} are not {method}'s")
    return _deep_params({**shared, **own}, groups)


def _deep_params(merged: dict[str, Any], groups: dict[str, type]) -> dict[str, Any]:
    """A deep method's constructor arguments from its flat settings: each settings object
    (`loop`, `objective`) made from the keys of its fields, the other keys as they are."""
    params = {}
    for argument, cls in groups.items():
        names = {f.name for f in dataclasses.fields(cls)}
        try:
            params[argument] = cls(**{k: v for k, v in merged.items() if k in names})
        except (TypeError, ValueError) as err:
            raise ConfigError(f"params.yaml: train: {err}") from err
        merged = {k: v for k, v in merged.items() if k not in names}
    return {**params, **merged}


def method_bits(params: dict[str, Any], method: str) -> list[int]:
    """The code lengths params.yaml asks `method` to run at: train.bits for the deep methods,
    baselines.bits for the shallow ones; KMH only where its subspaces divide the length (as in
    the paper's table)."""
    from shdh.hashers.kmh import KMH

    if is_deep(method):
        return list(params["train"]["bits"])
    baselines = params.get("baselines") or {}
    kmh_bits = (baselines.get("kmh") or {}).get("bits_per_subspace", 4)
    return [b for b in baselines.get("bits", []) if method != "kmh" or KMH.supports(b, kmh_bits)]


def models_root(params: dict[str, Any], method: str) -> Path:
    """Where `method`'s model folders live: train.models_dir for the deep methods (a DVC
    output per method), baselines.models_dir for the shallow ones (one output for all)."""
    section = "train" if is_deep(method) else "baselines"
    return Path(params[section]["models_dir"])


def planned_runs(params: dict[str, Any]) -> list[tuple[str, int, int | None]]:
    """(method, bits, own seed) for every deep and shallow method the params ask for, in that
    order; the seed is None without a `seeds` list (section_seeds)."""
    train, baselines = params["train"], params.get("baselines") or {}
    runs = [
        (m, b, s) for b in train["bits"] for m in train["methods"] for s in section_seeds(train)
    ]
    for b in baselines.get("bits", []):
        runs += [
            (m, b, s)
            for m in baselines.get("methods", [])
            if b in method_bits(params, m)
            for s in section_seeds(baselines)
        ]
    return runs


def fit_plan(
    section: dict[str, Any] | None,
    method: str,
    bits: int,
    own_seed: int | None,
    *,
    seed: int,
    models_root: str | Path,
) -> Fit:
    """The fit of `method` at `bits` with `own_seed` (None: the master seed `seed`), from its
    section of the settings (train for deep methods, baselines for shallow ones), stored under
    models_root/METHOD/METHOD-BITS[-seedS]. Without a section, the fit as the score step sees
    it: where its model is and what it is called (no hyper-parameters)."""
    return Fit(
        method=method,
        bits=int(bits),
        seed=fit_seed(seed, own_seed),
        own_seed=own_seed,
        name=run_name(method, bits, own_seed),
        out_dir=model_dir(models_root, method, bits, own_seed),
        params=method_params(section, method) if section is not None else {},
        n_train=section.get("n_train") if section is not None else None,
    )


def planned_fits(
    params: dict[str, Any], models_roots: dict[str, str | Path] | None = None
) -> list[Fit]:
    """Every fit the settings ask for, deep ones first (planned_runs' order). models_roots
    replaces the folders of the deep ("train") or shallow ("baselines") model folders, e.g. a
    Kubeflow step's gathered artifacts."""
    roots = models_roots or {}
    fits = []
    for method, bits, own_seed in planned_runs(params):
        section = "train" if is_deep(method) else "baselines"
        root = roots.get(section) or models_root(params, method)
        fits.append(
            fit_plan(params[section], method, bits, own_seed, seed=params["seed"], models_root=root)
        )
    return fits
