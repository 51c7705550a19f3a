"""The paper's figures from a finished evaluation: the curves it saved, drawn as PNGs.

`shdh evaluate` saves every method's weighted-recall curves to results/curves.npz, so that the
figures (and `shdh report`, which redraws them) need no ranking again:

- Fig. 3 a-f: weighted recall against the weighted Hamming radius, one figure per code length;
- Fig. 3 g-l: weighted recall WR@n for n = 1..curve_max, one figure per code length;
- Fig. 4: WR@N against the code length, N = 10,000 as in the paper, or the longest curve the
  evaluation kept (evaluate.curve_max) when that is shorter; the caption says which.

Fig. 5 (sensitivity to alpha) needs one SHDH training per alpha and seed: run
`benchmarks/shdh_vs_dpsh.py --variants shdh:alpha=0.25 ... --out results/alpha_sweep.json`, and
every later report draws it from that file.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shdh.core.metrics import Curves
from shdh.hashers import method_catalogue
from shdh.runtime.array_files import load_arrays
from shdh.runtime.atomic import atomic_path

CURVES_FILE = "curves.npz"
ALPHA_FILE = "alpha_sweep.json"  # benchmarks/shdh_vs_dpsh.py --out, with shdh:alpha=... variants
PLOTS_DIR = "plots"
FIG4_N = 10_000  # the paper's Fig. 4 depth
_CURVE_FIELDS = ("wr_at_n", "radius", "radius_real", "wr_at_radius")


@dataclass(frozen=True)
class Figure:
    path: Path
    caption: str


# ---- results/curves.npz ---------------------------------------------------------------------


def save_curves(
    path: str | Path, curves: dict[tuple[str, int], Curves], *, dataset: str, n: int
) -> Path:
    """One npz: arrays named METHOD/BITS/FIELD, plus the dataset name and the @n of the tables."""
    arrays: dict[str, np.ndarray] = {"dataset": np.array(dataset), "n": np.array(n)}
    for (method, bits), c in curves.items():
        for field in _CURVE_FIELDS:
            arrays[f"{method}/{bits}/{field}"] = np.asarray(getattr(c, field))
    path = Path(path)
    with atomic_path(path, suffix=".npz") as tmp, open(tmp, "wb") as f:
        np.savez_compressed(f, **arrays)
    return path


def load_curves(path: str | Path) -> tuple[dict[tuple[str, int], Curves], str, int]:
    """(curves by (method, bits), dataset name, n), or a ValueError naming the file and field."""
    path = Path(path)
    arrays = load_arrays(path, "the saved curves", "rerun `shdh evaluate`")
    for key in ("dataset", "n"):
        if key not in arrays:
            raise ValueError(f"{path}: field '{key}' is missing; rerun `shdh evaluate`")
    grouped: dict[tuple[str, int], dict[str, np.ndarray]] = {}
    for key, value in arrays.items():
        if key in ("dataset", "n"):
            continue
        parts = key.split("/")
        if len(parts) != 3 or not parts[1].isdigit() or parts[2] not in _CURVE_FIELDS:
            raise ValueError(f"{path}: field '{key}' is not METHOD/BITS/{'|'.join(_CURVE_FIELDS)}")
        grouped.setdefault((parts[0], int(parts[1])), {})[parts[2]] = value
    curves = {}
    for (method, bits), fields in grouped.items():
        missing = [f for f in _CURVE_FIELDS if f not in fields]
        if missing:
            raise ValueError(f"{path}: field '{method}/{bits}/{missing[0]}' is missing")
        curves[(method, bits)] = Curves(**fields)
    return curves, str(arrays["dataset"]), int(arrays["n"])


# ---- the figures ----------------------------------------------------------------------------


# The row order and the labels of the tables and the figures alike, read from the methods'
# declarations (shdh.hashers.method_catalogue) when a table is written, so that a method declared
# after import (a test's toy) is placed and named as a built-in one.


def ordered_methods(methods: Iterable[str]) -> list[str]:
    """The paper's row order (Table 1), then anything else we ran, then the random floor."""
    ranked = sorted((m for m in method_catalogue.METHODS if m.paper_row), key=lambda m: m.paper_row)
    rank = {m.name: i for i, m in enumerate(ranked)}
    return sorted(methods, key=lambda m: (m == "random", rank.get(m, len(rank)), m))


def display_name(method: str) -> str:
    """A method's title in the tables (its name when it has no declaration)."""
    if method == "random":
        return "random codes (floor)"
    return next((m.title for m in method_catalogue.METHODS if m.name == method), method)


def _label(method: str) -> str:
    return "random codes" if method == "random" else display_name(method)


def _draw(
    path: Path,
    title: str,
    xlabel: str,
    ylabel: str,
    lines,
    *,
    xticks=None,
    xlog: bool = False,
    full_range: bool = True,
) -> Path:
    """One line plot with labelled axes and a legend, written atomically. A line is
    (label, x, y, style) or (label, x, y, style, y error). full_range: y from 0 to 1 (recall
    curves); otherwise fitted to the data (values that differ by little)."""
    import matplotlib

    matplotlib.use("Agg")  # headless: no display on pipeline workers
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    for label, x, y, style, *err in lines:
        if err:
            ax.errorbar(x, y, yerr=err[0], fmt=style, label=label, markersize=4, capsize=3)
        else:
            ax.plot(x, y, style, label=label, markersize=4)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if full_range:
        ax.set_ylim(0, 1.02)
    if xlog:
        ax.set_xscale("log", base=2)
        ax.minorticks_off()
    if xticks is not None:
        ax.set_xticks(list(xticks), [f"{t:g}" for t in xticks])
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    return path


def _style(method: str) -> str:
    return "k:" if method == "random" else "-"


def wr_at_n_figure(by_method: dict[str, Curves], path: str | Path, *, title: str) -> Path:
    """Fig. 3 g-l: WR@n against n, one line per method."""
    lines = [
        (_label(m), np.arange(1, len(by_method[m].wr_at_n) + 1), by_method[m].wr_at_n, _style(m))
        for m in ordered_methods(by_method)
    ]
    return _draw(
        Path(path),
        f"Weighted recall WR@n, {title}",
        "number of retrieved items n",
        "weighted recall WR@n",
        lines,
    )


def radius_figure(by_method: dict[str, Curves], path: str | Path, *, title: str) -> Path:
    """Fig. 3 a-f: the share of the total gain within each weighted Hamming radius (cumulative).

    Radii are in the units of the segment weights (plain Hamming: bits), so that methods with
    and without weights share the axis; the radius is normalised by the code length.
    """
    lines = []
    for m in ordered_methods(by_method):
        c = by_method[m]
        span = float(c.radius_real[-1]) or 1.0
        lines.append((_label(m), c.radius_real / span, c.wr_at_radius, _style(m)))
    return _draw(
        Path(path),
        f"Weighted recall by radius, {title}",
        "weighted Hamming radius / its maximum",
        "weighted recall within the radius",
        lines,
    )


def wr_vs_bits_figure(curves: dict[tuple[str, int], Curves], path: str | Path) -> tuple[Path, int]:
    """Fig. 4: WR@N against the code length, N = min(10,000, the shortest saved curve)."""
    depth = min([FIG4_N, *(len(c.wr_at_n) for c in curves.values())])
    lines = []
    for m in ordered_methods({m for m, _ in curves}):
        bits = sorted(b for mm, b in curves if mm == m)
        wr = [curves[(m, b)].wr_at_n[depth - 1] for b in bits]
        lines.append((_label(m), bits, wr, "k:o" if m == "random" else "-o"))
    _draw(
        Path(path),
        f"WR@{depth} against code length",
        "code length (bits)",
        f"weighted recall WR@{depth}",
        lines,
        xticks=sorted({b for _, b in curves}),
        full_range=False,
    )
    return Path(path), depth


def load_alpha_sweep(path: str | Path) -> list[dict[str, Any]]:
    """The runs of an alpha sweep (benchmarks/shdh_vs_dpsh.py --out): rows with a variant
    'shdh:alpha=A' and the metrics; a ValueError names the file and the bad row."""
    path = Path(path)
    try:
        rows = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ValueError(f"{path}: cannot read the alpha sweep ({err})") from err
    if not isinstance(rows, list):
        raise ValueError(f"{path}: expected a list of runs, got {type(rows).__name__}")
    sweep = []
    for i, row in enumerate(rows):
        variant = row.get("variant", "") if isinstance(row, dict) else ""
        method, _, settings = variant.partition(":")
        alpha = dict(kv.partition("=")[::2] for kv in settings.split(",") if kv).get("alpha")
        if method != method_catalogue.PAPER_METHOD or alpha is None:
            continue  # other variants of the same benchmark run (dpsh, the default shdh)
        missing = [k for k in ("ndcg@100", "ndcg_list@100") if k not in row]
        if missing:
            raise ValueError(f"{path}: run {i} ({variant}): field '{missing[0]}' is missing")
        sweep.append({**row, "alpha": float(alpha)})
    if not sweep:
        raise ValueError(f"{path}: no 'shdh:alpha=...' runs in it")
    return sweep


def alpha_figure(sweep: list[dict[str, Any]], path: str | Path) -> Path:
    """Fig. 5: NDCG@100 against alpha (the weight of E2), mean and spread over seeds."""
    alphas = sorted({r["alpha"] for r in sweep})
    lines = []
    for key, label in (
        ("ndcg_list@100", "NDCG@100 (list ideal, the paper's)"),
        ("ndcg@100", "NDCG@100 (database ideal)"),
    ):
        values = [[r[key] for r in sweep if r["alpha"] == a] for a in alphas]
        lines.append(
            (
                label,
                alphas,
                [float(np.mean(v)) for v in values],
                "-o",
                [float(np.std(v)) for v in values],
            )
        )
    seeds = len({r.get("seed") for r in sweep})
    return _draw(
        Path(path),
        f"SHDH's sensitivity to alpha ({seeds} seeds)",
        "alpha (weight of E2)",
        "NDCG@100",
        lines,
        xlog=True,
        xticks=alphas,
    )


def write_figures(
    curves: dict[tuple[str, int], Curves],
    plots_dir: str | Path,
    alpha_sweep: list[dict[str, Any]] | None = None,
) -> list[Figure]:
    """Every figure of a run into plots_dir, in the paper's order, each with its caption."""
    plots_dir = Path(plots_dir)
    bits_all = sorted({b for _, b in curves})
    figures = []
    for bits in bits_all:
        by_method = {m: c for (m, b), c in curves.items() if b == bits}
        path = radius_figure(
            by_method, plots_dir / f"wr_by_radius-{bits}.png", title=f"{bits} bits"
        )
        figures.append(
            Figure(
                path,
                f"Fig. 3 (a-f): weighted recall within each weighted Hamming radius, {bits} bits.",
            )
        )
    for bits in bits_all:
        by_method = {m: c for (m, b), c in curves.items() if b == bits}
        path = wr_at_n_figure(by_method, plots_dir / f"wr_at_n-{bits}.png", title=f"{bits} bits")
        figures.append(
            Figure(
                path,
                f"Fig. 3 (g-l): weighted recall WR@n for n = 1.."
                f"{len(next(iter(by_method.values())).wr_at_n)}, "
                f"{bits} bits.",
            )
        )
    path, depth = wr_vs_bits_figure(curves, plots_dir / "wr_vs_bits.png")
    note = (
        ""
        if depth == FIG4_N
        else (
            f" (the paper's WR@{FIG4_N} needs evaluate.curve_max >= "
            f"{FIG4_N}; this run kept {depth})"
        )
    )
    figures.append(Figure(path, f"Fig. 4: WR@{depth} against the code length{note}."))
    if alpha_sweep:
        bits = "/".join(str(b) for b in sorted({r.get("bits", "?") for r in alpha_sweep}))
        path = alpha_figure(alpha_sweep, plots_dir / "alpha.png")
        caption = (
            f"Fig. 5: SHDH's NDCG@100 against alpha, mean and standard deviation over "
            f"seeds, {bits} bits ({ALPHA_FILE})."
        )
        figures.append(Figure(path, caption))
    return figures
