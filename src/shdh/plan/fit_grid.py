"""The grid of fits a section of the settings asks for, in the plan's order: its methods, code
lengths and seeds, as (method, bits, own seed) runs; shdh.plan.all_methods makes each a `Fit`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shdh.runtime.errors import ConfigError

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
