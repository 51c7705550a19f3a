"""The shallow methods' part of the plan: their settings, code lengths and folder (the
`baselines` section).

`shdh baselines` plans with these alone (shdh.plan.fit_grid with shallow_method_params), so that the
DVC stage fitting the shallow methods does not depend on the deep methods' code;
shdh.plan.all_methods adds the deep methods for every other front door.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shdh.hashers.shallow import shallow_hasher_class
from shdh.plan.fit_grid import constructor_keys, own_settings
from shdh.runtime.errors import ConfigError


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
