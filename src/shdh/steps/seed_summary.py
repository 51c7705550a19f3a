"""What the score step writes over seeds: with a `seeds` list every method is fitted once per
seed, and metrics.json, the tables, the figures and timings.json hold the mean over them (with
the sample standard deviation as METRIC_sd), metrics_by_seed.json every fit's own figures. Kept
apart from the ranking and scoring so that each can be read and tested on its own."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shdh.core.metrics import Curves
from shdh.plan.fits import fit_name


@dataclass
class Scored:
    method: str
    bits: int
    metrics: dict[str, float]
    curves: Curves
    codes_path: Path
    seed: int  # the seed of the fit (metrics_by_seed.json keys each fit by it)
    cached: bool = False  # read from the score cache (shdh.steps.score_cache), not ranked again


def _groups(scored: list[Scored]) -> dict[tuple[str, int], list[Scored]]:
    """The fits of each (method, bits), over their seeds, in scoring order."""
    groups: dict[tuple[str, int], list[Scored]] = {}
    for s in scored:
        groups.setdefault((s.method, s.bits), []).append(s)
    return groups


def nested_metrics(scored: list[Scored]) -> dict[str, Any]:
    """{method: {bits: {metric: value}}}, the layout of metrics.json: the mean over the seeds,
    and, where there are several, METRIC_sd (the sample standard deviation) and `seeds`."""
    out: dict[str, Any] = {}
    for (method, bits), fits in _groups(scored).items():
        row: dict[str, float] = {}
        for key in fits[0].metrics:
            values = [float(f.metrics[key]) for f in fits]
            row[key] = round(statistics.fmean(values), 6)
            if len(fits) > 1:
                row[f"{key}_sd"] = round(statistics.stdev(values), 6)
        if len(fits) > 1:
            row["seeds"] = len(fits)
        out.setdefault(method, {})[str(bits)] = row
    return out


def metrics_by_seed(scored: list[Scored]) -> dict[str, Any]:
    """{method: {bits: {seed: {metric: value}}}}: every fit's own figures (metrics_by_seed.json),
    from which metrics.json's means and spreads are computed."""
    out: dict[str, Any] = {}
    for s in scored:
        out.setdefault(s.method, {}).setdefault(str(s.bits), {})[str(s.seed)] = {
            k: round(float(v), 6) for k, v in s.metrics.items()
        }
    return out


def mean_curves(scored: list[Scored]) -> dict[tuple[str, int], Curves]:
    """Each (method, bits)'s curves averaged over its seeds (the figures show the mean). The
    radius axis is the same for every seed: it is set by the segment sizes and weights."""
    out = {}
    for key, fits in _groups(scored).items():
        first = fits[0].curves
        if any(not np.array_equal(f.curves.radius, first.radius) for f in fits):
            raise ValueError(f"{fit_name(*key)}: the seeds' codes have different radius axes")
        out[key] = Curves(
            wr_at_n=np.mean([f.curves.wr_at_n for f in fits], axis=0),
            radius=first.radius,
            radius_real=first.radius_real,
            wr_at_radius=np.mean([f.curves.wr_at_radius for f in fits], axis=0),
        )
    return out


def mean_timings(timings: dict[str, dict[str, list[dict]]], items: int) -> dict[str, Any]:
    """timings.json: fit and encode seconds per method and code length, the mean over seeds."""

    def mean(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return round(statistics.fmean(known), 3) if known else None

    return {
        method: {
            bits: {
                "fit_seconds": mean([r["fit_seconds"] for r in rows]),
                "encode_seconds": mean([r["encode_seconds"] for r in rows]),
                "items_encoded": items,
                **({"seeds": len(rows)} if len(rows) > 1 else {}),
            }
            for bits, rows in by_bits.items()
        }
        for method, by_bits in timings.items()
    }
