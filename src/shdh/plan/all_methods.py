"""The whole run plan: which fits a params file asks for, for every method, deep or shallow.

Every front door (the DVC stages through the CLI, the Kubeflow components, the offsite trainer
shdh.bundle) plans with `method_params` and `planned_fits` from here, and hands the library steps
the `Fit`s they make, so that a fit is named, seeded and stored the same way whoever runs it.
Pure functions of the settings: no I/O, and nothing a bare GPU machine lacks. A method's settings
come from its declaration (shdh.hashers.method_catalogue), so planning loads no method's code
(KMH's code lengths aside: its class says which it can make); the seeds and the order of the fits
are shdh.plan.fit_grid, what a fit is, what it is called and where its files live shdh.plan.fits.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from shdh.hashers.method_catalogue import method
from shdh.plan.fit_grid import own_settings, runs
from shdh.plan.fits import Fit, make_fit
from shdh.runtime.errors import ConfigError
from shdh.training.loop_settings import LoopSettings

# What the pipeline decides around a fit, not a setting of the method: which fits, where, on how
# many processes (a TrainJob's nodes and processes per node, shdh.plan.processes).
PIPELINE_KEYS = ("methods", "bits", "models_dir", "n_train", "seeds", "nodes", "processes_per_node")


def method_params(section: dict[str, Any], name: str) -> dict[str, Any]:
    """Constructor arguments for method `name` from its params.yaml section.

    A shallow method takes its sub-mapping of `baselines` (`baselines.ksh`), field by field. A
    deep method takes the backbone and loop settings of `train` as one LoopSettings (its `loop`)
    and its own settings as one object of its settings dataclass (its `settings`: SHDH's layout
    and alpha, DPSH's eta; `reduction` is shared), each set key by key, with its sub-mapping
    (`train.shdh`, `train.oracle`) able to override any shared one. Keys the method does not
    take are refused by name, so a typo cannot be silently ignored.
    """
    declared = method(name)
    own = own_settings(section, name)
    accepted = {f.name for f in dataclasses.fields(declared.settings)}
    if not declared.deep:
        _refuse(sorted(set(own) - accepted), f"params.yaml: {name}: unknown settings")
        return dict(own)
    groups = {"loop": LoopSettings, "settings": declared.settings}
    accepted |= {f.name for f in dataclasses.fields(LoopSettings)}
    _refuse(sorted(set(own) - accepted), f"params.yaml: {name}: unknown settings")
    skip = set(PIPELINE_KEYS) | {m for m in section if isinstance(section[m], dict)}
    shared = {k: v for k, v in section.items() if k not in skip}
    _refuse(sorted(set(shared) - accepted), "params.yaml: train: settings", f"are not {name}'s")
    merged, params = {**shared, **own}, {}
    for argument, cls in groups.items():
        names = {f.name for f in dataclasses.fields(cls)}
        try:
            params[argument] = cls(**{k: v for k, v in merged.items() if k in names})
        except (TypeError, ValueError) as err:
            raise ConfigError(f"params.yaml: train: {err}") from err
    return params


def _refuse(keys: list[str], prefix: str, suffix: str = "") -> None:
    if keys:
        raise ConfigError(f"{prefix} {keys}{' ' + suffix if suffix else ''}")


def method_bits(params: dict[str, Any], name: str) -> list[int]:
    """The code lengths params.yaml asks method `name` to run at: train.bits for the deep
    methods, baselines.bits for the shallow ones, less those the method cannot make with its
    settings (KMH's that its subspaces do not divide, as in the paper's table)."""
    declared = method(name)
    section = params.get(declared.section) or {}
    bits = list(section.get("bits", []))
    if declared.deep:
        return bits
    supports = declared.load_class().supports
    return [b for b in bits if supports(b, **own_settings(section, name))]


def models_root(params: dict[str, Any], name: str) -> Path:
    """Where method `name`'s model folders live: train.models_dir for the deep methods (a DVC
    output per method), baselines.models_dir for the shallow ones (one output for all)."""
    return Path(params[method(name).section]["models_dir"])


def planned_runs(params: dict[str, Any]) -> list[tuple[str, int, int | None]]:
    """(method, bits, own seed) for every deep and shallow method the params ask for, in that
    order; the seed is None without a `seeds` list (fit_grid.section_seeds)."""
    train, baselines = params["train"], params.get("baselines") or {}
    shallow = runs(
        baselines,
        list(baselines.get("methods", [])),
        list(baselines.get("bits", [])),
        bits_of=lambda name: method_bits(params, name),
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
    for name, bits, own_seed in planned_runs(params):
        section = method(name).section
        root = roots.get(section) or models_root(params, name)
        fits.append(
            fit_plan(params[section], name, bits, own_seed, seed=params["seed"], models_root=root)
        )
    return fits


def fit_plan(
    section: dict[str, Any],
    name: str,
    bits: int,
    own_seed: int | None,
    *,
    seed: int,
    models_root: str | Path,
) -> Fit:
    """The fit of method `name` at `bits` with `own_seed` (None: the master seed `seed`), with
    the constructor arguments method_params(section, name), stored under
    models_root/METHOD/NAME."""
    return make_fit(
        name,
        bits,
        own_seed,
        seed=seed,
        models_root=models_root,
        params=method_params(section, name),
        n_train=section.get("n_train"),
    )


def section_fits(
    section: dict[str, Any],
    methods: list[str],
    bits: list[int],
    *,
    seed: int,
    models_root: str | Path,
    seeds: list[int] | None = None,
) -> list[Fit]:
    """The fits of fit_grid.runs(section, methods, bits, seeds=seeds), made by fit_plan."""
    return [
        fit_plan(section, name, b, own_seed, seed=seed, models_root=models_root)
        for name, b, own_seed in runs(section, methods, bits, seeds=seeds)
    ]
