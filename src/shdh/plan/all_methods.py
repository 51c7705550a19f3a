"""The whole run plan: which fits a params file asks for, for every method, deep or shallow.

Every front door (the DVC stages through the CLI, the Kubeflow components, the offsite trainer
shdh.bundle) plans with `method_params` and `planned_fits` from here, and hands the library steps
the `Fit`s they make, so that a fit is named, seeded and stored the same way whoever runs it.
Pure functions of the settings: no I/O, and nothing a bare GPU machine lacks. This module adds
the deep methods (their settings objects, and the catalogue that names them, which loads their
code) to the shallow part (shdh.plan.shallow); the seeds and the order of the fits are
shdh.plan.fit_grid, what a fit is, what it is called and where its files live shdh.plan.fits.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from shdh.hashers import get_hasher_class, is_deep
from shdh.plan.fit_grid import constructor_keys, fit_plan, own_settings, runs
from shdh.plan.fits import Fit
from shdh.plan.shallow import shallow_method_bits, shallow_method_params, shallow_models_root
from shdh.runtime.errors import ConfigError
from shdh.training.loop_settings import LoopSettings

# Keys of the `train` section that configure the pipeline rather than a method.
# What the pipeline decides around a fit, not a setting of the method: which fits, where, on how
# many processes (a TrainJob's nodes and processes per node, shdh.plan.processes).
PIPELINE_KEYS = ("methods", "bits", "models_dir", "n_train", "seeds", "nodes", "processes_per_node")


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
    if not is_deep(method):
        return shallow_method_params(section, method)
    cls = get_hasher_class(method)
    accepted = constructor_keys(cls)
    own = own_settings(section, method)
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
    if is_deep(method):
        return list(params["train"]["bits"])
    return shallow_method_bits(params, method)


def models_root(params: dict[str, Any], method: str) -> Path:
    """Where `method`'s model folders live: train.models_dir for the deep methods (a DVC
    output per method), baselines.models_dir for the shallow ones (one output for all)."""
    return Path(params["train"]["models_dir"]) if is_deep(method) else shallow_models_root(params)


def planned_runs(params: dict[str, Any]) -> list[tuple[str, int, int | None]]:
    """(method, bits, own seed) for every deep and shallow method the params ask for, in that
    order; the seed is None without a `seeds` list (section_seeds)."""
    train, baselines = params["train"], params.get("baselines") or {}
    shallow = runs(
        baselines,
        list(baselines.get("methods", [])),
        list(baselines.get("bits", [])),
        bits_of=lambda method: method_bits(params, method),
    )
    return runs(train, list(train["methods"]), list(train["bits"])) + shallow


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
            fit_plan(
                params[section],
                method,
                bits,
                own_seed,
                seed=params["seed"],
                models_root=root,
                method_params=method_params,
            )
        )
    return fits
