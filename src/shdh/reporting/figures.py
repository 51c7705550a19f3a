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


# The row order, the family groups and the labels of the tables and the figures alike, read
# from the methods' declarations (shdh.hashers.method_catalogue) when a table is written, so that
# a method declared after import (a test's toy) is placed and named as a built-in one.
RANDOM = "random"  # evaluate's random codes: the floor, shown with the reference rows


def grouped_methods(methods: Iterable[str]) -> list[tuple[str, list[str]]]:
    """The methods present, as (family, methods) in the catalogue's family order, each family's
    methods in declaration order; families with none of them are left out. A name with no
    declaration (a method since removed) is shown under "other", the random floor last of all,
    with the reference rows (the classifier bound)."""
    declared = method_catalogue.by_name()
    present = set(methods)
    groups = {family: [] for family in method_catalogue.FAMILIES}
    for m in method_catalogue.METHODS:
        if m.name in present:
            groups[m.family].append(m.name)
    groups[method_catalogue.OTHER] += sorted(present - set(declared) - {RANDOM})
    if RANDOM in present:
        groups[method_catalogue.REFERENCE].append(RANDOM)
    return [(family, names) for family, names in groups.items() if names]


def ordered_methods(methods: Iterable[str]) -> list[str]:
    """The methods present in the tables' row order: family by family (grouped_methods)."""
    return [m for _, names in grouped_methods(methods) for m in names]


def display_name(method: str) -> str:
    """A method's title in the tables (its name when it has no declaration)."""
    if method == RANDOM:
        return "random codes (floor)"
    return next((m.title for m in method_catalogue.METHODS if m.name == method), method)


def _label(method: str) -> str:
    return "random codes" if method == RANDOM else display_name(method)


# A method's line: its family's colour, and a marker and a line style by its place in the family,
# so that up to twenty lines stay told apart and a family reads as one colour (the random floor:
# black dots). The legend lists the lines family by family under the family's name.
_FAMILY_COLOURS = {
    method_catalogue.UNSUPERVISED: "tab:brown",
    method_catalogue.PAIRWISE_SHALLOW: "tab:blue",
    method_catalogue.HIERARCHICAL_SHALLOW: "tab:purple",
    method_catalogue.PAIRWISE_DEEP: "tab:orange",
    method_catalogue.CENTRES_DEEP: "tab:green",
    method_catalogue.HIERARCHICAL_DEEP: "tab:red",
    method_catalogue.OTHER: "tab:olive",
    method_catalogue.REFERENCE: "black",
}
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")
_LINESTYLES = ("-", "--", "-.", (0, (1, 1)))
_MARKS_PER_LINE = 8  # markers along a long curve, staggered from one line to the next


@dataclass(frozen=True)
class _Line:
    label: str
    x: Any
    y: Any
    style: dict[str, Any]  # matplotlib's keyword arguments: color, marker, linestyle, ...
    group: str | None = None  # the legend heading it is listed under
    yerr: Any = None


def _method_lines(methods: Iterable[str], xy) -> list[_Line]:
    """One line per method, family by family: xy(method) gives its (x, y)."""
    lines = []
    for family, names in grouped_methods(methods):
        for place, m in enumerate(names):
            x, y = xy(m)
            style = _method_style(m, family, place, len(lines), len(x))
            lines.append(_Line(_label(m), x, y, style, family))
    return lines


def _method_style(method: str, family: str, place: int, line: int, points: int) -> dict[str, Any]:
    """The family's colour; the marker and the line style of the method's place in it. On a
    long curve a few markers only, at points staggered from one line to the next."""
    style: dict[str, Any] = {
        "color": _FAMILY_COLOURS.get(family, "tab:gray"),
        "marker": _MARKERS[place % len(_MARKERS)],
        "linestyle": _LINESTYLES[place % len(_LINESTYLES)],
    }
    if points > 2 * _MARKS_PER_LINE:
        step = points // _MARKS_PER_LINE
        style["markevery"] = ((line * step // 5) % step, step)
    if method == RANDOM:
        style.update(color="black", linestyle=":", marker="" if "markevery" in style else "o")
    return style


def _draw(
    path: Path,
    title: str,
    xlabel: str,
    ylabel: str,
    lines: list[_Line],
    *,
    xticks=None,
    xlog: bool = False,
    full_range: bool = True,
) -> Path:
    """One line plot with labelled axes and a legend, written atomically. Lines with a group
    are listed in the legend under their group's heading, beside the plot; a line with yerr is
    drawn with error bars. full_range: y from 0 to 1 (recall curves); otherwise fitted to the
    data (values that differ by little)."""
    import matplotlib

    matplotlib.use("Agg")  # headless: no display on pipeline workers
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    grouped = any(line.group for line in lines)
    entries = len(lines) + len({line.group for line in lines if line.group})
    height = max(4.0, 0.18 * entries + 0.8) if grouped else 4.0
    fig, ax = plt.subplots(figsize=(8.0 if grouped else 5.5, height))
    handles, labels, headings = [], [], []
    group = None
    for line in lines:
        if line.yerr is not None:
            drawn = ax.errorbar(
                line.x, line.y, yerr=line.yerr, markersize=4, capsize=3, **line.style
            )
        else:
            (drawn,) = ax.plot(line.x, line.y, markersize=4, **line.style)
        if line.group and line.group != group:
            group = line.group
            headings.append(len(labels))
            handles.append(Line2D([], [], linestyle="none"))
            labels.append(group)
        handles.append(drawn)
        labels.append(line.label)
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
    if grouped:
        legend = ax.legend(
            handles,
            labels,
            fontsize=7,
            loc="upper left",
            bbox_to_anchor=(1.02, 1.0),
            frameon=False,
            handlelength=3.0,
        )
        for i in headings:
            legend.get_texts()[i].set_fontweight("bold")
    else:
        ax.legend(handles, labels, fontsize=8)
    fig.tight_layout()
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    return path


def wr_at_n_figure(by_method: dict[str, Curves], path: str | Path, *, title: str) -> Path:
    """Fig. 3 g-l: WR@n against n, one line per method."""

    def xy(m: str):
        return np.arange(1, len(by_method[m].wr_at_n) + 1), by_method[m].wr_at_n

    return _draw(
        Path(path),
        f"Weighted recall WR@n, {title}",
        "number of retrieved items n",
        "weighted recall WR@n",
        _method_lines(by_method, xy),
    )


def radius_figure(by_method: dict[str, Curves], path: str | Path, *, title: str) -> Path:
    """Fig. 3 a-f: the share of the total gain within each weighted Hamming radius (cumulative).

    Radii are in the units of the segment weights (plain Hamming: bits), so that methods with
    and without weights share the axis; the radius is normalised by the code length.
    """

    def xy(m: str):
        c = by_method[m]
        span = float(c.radius_real[-1]) or 1.0
        return c.radius_real / span, c.wr_at_radius

    return _draw(
        Path(path),
        f"Weighted recall by radius, {title}",
        "weighted Hamming radius / its maximum",
        "weighted recall within the radius",
        _method_lines(by_method, xy),
    )


def wr_vs_bits_figure(curves: dict[tuple[str, int], Curves], path: str | Path) -> tuple[Path, int]:
    """Fig. 4: WR@N against the code length, N = min(10,000, the shortest saved curve)."""
    depth = min([FIG4_N, *(len(c.wr_at_n) for c in curves.values())])

    def xy(m: str):
        bits = sorted(b for mm, b in curves if mm == m)
        return bits, [curves[(m, b)].wr_at_n[depth - 1] for b in bits]

    _draw(
        Path(path),
        f"WR@{depth} against code length",
        "code length (bits)",
        f"weighted recall WR@{depth}",
        _method_lines({m for m, _ in curves}, xy),
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
            _Line(
                label,
                alphas,
                [float(np.mean(v)) for v in values],
                {"fmt": "-o"},
                yerr=[float(np.std(v)) for v in values],
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
