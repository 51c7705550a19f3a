"""The report step: the results tables, and a report such as docs/results.md (its generated
block of tables and figures; the figures themselves: shdh.reporting.figures)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from shdh.hashers import method_catalogue
from shdh.reporting.figures import (
    CURVES_FILE,
    PLOTS_DIR,
    Figure,
    display_name,
    grouped_methods,
    load_alpha_sweep,
    load_curves,
    write_figures,
)
from shdh.runtime.atomic import check_writable
from shdh.runtime.json_files import read_json_object

# evaluate's outputs that later steps read: the scores ({method: {bits: {metric: value}}}) and
# the Markdown table printed from them.
METRICS_FILE = "metrics.json"
TABLE_FILE = "table.md"
TABLE_COLUMNS = ("acg", "dcg", "ndcg", "ndcg_list", "wr")


def column_names(n: int) -> list[str]:
    """The table columns as every document names them: NDCG@n is normalised by the ideal order
    of the whole database (metrics.json's ndcg@n, MLflow's ndcg_at_n), NDCG_list@n by that of
    the retrieved list (the paper's variant: ndcg_list@n, ndcg_list_at_n)."""
    return [f"{c.upper().replace('_LIST', '_list')}@{n}" for c in TABLE_COLUMNS]


def results_table(metrics: dict[str, Any], n: int = 100) -> str:
    """Markdown table: one row per method and code length, the @n metrics as columns.

    `ndcg` uses the ideal order of the whole database (standard); `ndcg_list` re-sorts the
    retrieved list (the paper-compatible variant). The methods come family by family, each
    under a heading row (shdh.hashers.method_catalogue.FAMILIES); random codes are listed last,
    as the floor. Over several seeds a cell is the mean +- the sample standard deviation.
    """
    header = "| method | bits | " + " | ".join(column_names(n)) + " |"
    lines = [header, "|---|---:|---:|---:|---:|---:|---:|"]
    for family, methods in grouped_methods(metrics):
        lines.append(_heading_row(family, 1 + len(TABLE_COLUMNS)))
        for method in methods:
            for bits in sorted(metrics[method], key=int):
                row = metrics[method][bits]
                cells = [
                    _cell(row.get(f"{c}@{n}"), row.get(f"{c}@{n}_sd"), 3 if c == "dcg" else 4)
                    for c in TABLE_COLUMNS
                ]
                lines.append(f"| {method} | {bits} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def _heading_row(family: str, cells: int) -> str:
    """A family's heading row: its name in the method column, the other cells empty."""
    return f"| *{family}* |" + " |" * cells


# ---- docs/results.md: our numbers in the layout of the paper's Table 1 ----------------------

# Paper Table 1 columns; the paper's NDCG is our NDCG_list (ideal order of the retrieved list).
_TABLE1_METRICS = (("ACG", "acg", 4), ("DCG", "dcg", 4), ("NDCG_list", "ndcg_list", 4))
BEGIN_MARK = "<!-- shdh evaluate: generated tables begin -->"
END_MARK = "<!-- shdh evaluate: generated tables end -->"


def _cell(value: float | None, spread: float | None, digits: int) -> str:
    """A table cell: the value, with its spread over seeds when there is one."""
    if value is None:
        return "-"
    return f"{value:.{digits}f}" + ("" if spread is None else f" ± {spread:.{digits}f}")


def _short_key(key: str, n: int) -> str:
    """metrics.json's "ndcg@100" -> "ndcg", "ndcg@100_sd" -> "ndcg_sd" (wr@1000 is kept)."""
    spread = key.endswith("_sd")
    return key.removesuffix("_sd").removesuffix(f"@{n}") + ("_sd" if spread else "")


def seeds_line(metrics: dict[str, Any]) -> str:
    """The caption that says a table's cells are means over seeds, or nothing for one seed."""
    counts = sorted(
        {
            int(row["seeds"])
            for by_bits in metrics.values()
            for row in by_bits.values()
            if "seeds" in row
        }
    )
    if not counts:
        return ""
    return (
        f"Each cell: mean ± sample standard deviation over {'/'.join(map(str, counts))} "
        "seeds (metrics_by_seed.json has every fit).\n"
    )


def _table1(
    rows: dict[str, dict[int, dict[str, float | None]]],
    bits: list[int],
    n: int,
    metrics=_TABLE1_METRICS,
) -> str:
    """Rows = methods, columns = each metric at each bit length: the paper's Table 1 layout,
    the methods family by family under heading rows. A metric's name is taken at n unless it
    names its own depth (mAP@1000)."""

    def label(name: str, b: int) -> str:
        return f"{name} {b}" if "@" in name else f"{name}@{n} {b}"

    head = "| method | " + " | ".join(label(m, b) for m, _, _ in metrics for b in bits) + " |"
    lines = [head, "|---|" + "---:|" * (len(metrics) * len(bits))]
    for family, methods in grouped_methods(rows):
        lines.append(_heading_row(family, len(metrics) * len(bits)))
        for method in methods:
            cells = []
            for _, key, digits in metrics:
                for b in bits:
                    row = rows[method].get(b, {})
                    cells.append(_cell(row.get(key), row.get(f"{key}_sd"), digits))
            lines.append(f"| {display_name(method)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def results_doc(
    metrics: dict[str, Any], *, dataset: str, n: int, figures: Sequence[tuple[str, str]] = ()
) -> str:
    """The generated part of docs/results.md: this run in Table 1 layout, the paper beside it.

    The paper's numbers are CIFAR-100's (IAPRTC-12's for that dataset): on another dataset only
    the ordering of the methods is comparable, not the values.
    """
    from shdh.reporting.paper_results import TABLES

    ours = {
        m: {int(b): {_short_key(k, n): v for k, v in row.items()} for b, row in by_bits.items()}
        for m, by_bits in metrics.items()
    }
    bits = sorted({b for by_bits in ours.values() for b in by_bits})
    paper_key = "iaprtc12" if dataset.startswith("iaprtc") else "cifar100"
    paper_bits, paper = TABLES[paper_key]
    paper_rows = {
        m: {b: {key: vals[i] for key, vals in cols.items()} for i, b in enumerate(paper_bits)}
        for m, cols in paper.items()
    }
    # the paper's NDCG is normalised by the retrieved list's ideal order: our NDCG_list
    paper_metrics = (("ACG", "acg", 4), ("DCG", "dcg", 4), ("NDCG_list", "ndcg", 4))
    paper_name = {"cifar100": "Table 1, CIFAR-100", "iaprtc12": "Table 2, IAPRTC-12"}[paper_key]
    parts = [
        BEGIN_MARK,
        f"### This run: {dataset}, @{n} (written by `shdh evaluate`)\n",
        "NDCG_list is the paper's NDCG (normalised by the ideal order of the retrieved list).\n",
        *filter(None, [seeds_line(metrics)]),
        _table1(ours, bits, n),
        f"NDCG@{n} normalised by the ideal order of the whole database (the stricter, standard "
        "form):\n",
        _table1(ours, bits, n, (("NDCG", "ndcg", 4),)),
        *_peers_section(ours, bits, n),
        f"### The paper ({paper_name}), for reference\n",
        _table1(paper_rows, list(paper_bits), n, paper_metrics),
        *_claims_section(ours, bits, paper_rows, list(paper_bits), n),
        *_figures_section(figures),
        END_MARK,
    ]
    return "\n".join(parts) + "\n"


def _peers_section(
    ours: dict[str, dict[int, dict[str, Any]]], bits: list[int], n: int
) -> list[str]:
    """The metrics other hashing work reports (shdh.core.peer_metrics), where the run has them."""
    present = {key for by_bits in ours.values() for row in by_bits.values() for key in row}
    columns = [
        (key.replace("mahp", "mAHP").replace("map", "mAP"), key, 4)
        for key in sorted(present, key=lambda k: (k.startswith("mahp"), k))
        if key.startswith(("map@", "mahp@")) and not key.endswith("_sd")
    ]
    if not columns:
        return []
    intro = (
        "The metrics other hashing work reports, for setting these numbers beside theirs: mAP@R "
        "with the finest label as relevance (DeepHash-pytorch, cisip-FIRe; @all: the whole "
        "database) and mAHP@R with shared levels as relevance (HPDH):\n"
    )
    return [intro, _table1(ours, bits, n, tuple(columns))]


# The paper's claims as (name, better side, worse side); a side is a method or a group, of which
# each cell takes the best method. Section 4.3: SHDH over its best competitor DPSH by 12.5-18.4%
# ACG, 10.7-16.7% DCG, 8.7-11.4% NDCG; the +H variants over their plain versions (KSH+H and
# COSDISH+H in the paper; DPSH+H and HashNet+H, ours, make the same comparison for deep
# methods); deep methods over shallow ones. A claim whose methods were not both run is left out.
HIERARCHICAL_SUFFIX = "+h"  # a method NAME+h is NAME trained on the hierarchical similarity


def claims() -> tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...]:
    """The claims, from the declared methods (shdh.hashers.method_catalogue, read now, so that a
    method declared later joins them): each +H variant over its plain method, in declaration
    order; then the deep and the shallow group, every declared method of that kind less a
    reference row (the classifier oracle), a bound to compare with rather than a method."""
    declared = method_catalogue.by_name()
    groups = {
        kind: tuple(m.name for m in method_catalogue.METHODS if m.kind == kind and not m.reference)
        for kind in method_catalogue.KINDS
    }
    over_plain = tuple(
        (f"{m.title} over {declared[plain].title}", (m.name,), (plain,))
        for m in method_catalogue.METHODS
        if m.name.endswith(HIERARCHICAL_SUFFIX)
        and (plain := m.name.removesuffix(HIERARCHICAL_SUFFIX)) in declared
    )
    return (
        ("SHDH over DPSH", ("shdh",), ("dpsh",)),
        *over_plain,
        ("best deep over best shallow", groups["deep"], groups["shallow"]),
    )


# (label, our key, the paper's key): the paper's NDCG is our list-ideal variant.
_CLAIM_METRICS = (
    ("ACG", "acg", "acg"),
    ("DCG", "dcg", "dcg"),
    ("NDCG_list", "ndcg_list", "ndcg"),
)


def _relative_gain(rows, better, worse, bits: int, key: str) -> float | None:
    """Percent by which the best of `better` beats the best of `worse` at `bits` (None: a side
    has no value there)."""

    def best(methods) -> float | None:
        values = [
            rows[m][bits][key]
            for m in methods
            if rows.get(m, {}).get(bits, {}).get(key) is not None
        ]
        return max(values) if values else None

    a, b = best(better), best(worse)
    return None if a is None or b is None or b == 0 else 100.0 * (a / b - 1.0)


def _claims_section(ours, bits: list[int], paper_rows, paper_bits: list[int], n: int) -> list[str]:
    """The paper's comparisons, as relative gains in this run beside the paper's own."""

    def cells(rows, bit_list, claim, key) -> list[float | None]:
        return [_relative_gain(rows, claim[1], claim[2], b, key) for b in bit_list]

    def fmt(values: list[float | None]) -> str:
        return " / ".join("-" if v is None else f"{v:+.1f}%" for v in values)

    lines = [
        f"| claim | metric@{n} | this run ({' / '.join(map(str, bits))} bits) | "
        f"paper ({' / '.join(map(str, paper_bits))} bits) | holds here |",
        "|---|---|---:|---:|---|",
    ]
    for claim in claims():
        for label, key, paper_key in _CLAIM_METRICS:
            here = cells(ours, bits, claim, key)
            there = cells(paper_rows, paper_bits, claim, paper_key)
            known = [v for v in here if v is not None]
            if not known:
                continue  # a method of the claim was not run
            wins = [v > 0 for v in known]  # the claim: the better side wins
            verdict = "yes" if all(wins) else "no" if not any(wins) else "partly"
            lines.append(f"| {claim[0]} | {label} | {fmt(here)} | {fmt(there)} | {verdict} |")
    if len(lines) == 2:
        return []
    return [
        "### The paper's claims on this run (relative gain of the better side)\n",
        "A claim holds where the better side wins at every code length (partly: at some). A "
        "group takes its best method at each code length. The paper's figures are its own "
        "tables' ratios (-: a side the paper did not run; the +H variants of the deep methods "
        "are this project's, making its +H comparison for deep methods).\n",
        "\n".join(lines) + "\n",
    ]


def _figures_section(figures: Sequence[tuple[str, str]]) -> list[str]:
    """Each figure (link, caption) as an image with its caption line under it."""
    if not figures:
        return []
    parts = ["### Figures (from curves.npz beside metrics.json; `shdh report` redraws them)\n"]
    for link, caption in figures:
        parts.append(f"![{caption}]({link})\n\n*{caption}*\n")
    return parts


def update_generated_section(
    path: str | Path, generated: str, *, title: str, intro: str = ""
) -> Path:
    """Replace the generated block of a hand-edited document, keeping everything around it.

    docs/results.md mixes the tables a run writes with the analysis people write about them;
    rewriting the whole file on every run would erase the analysis. A new file gets a title,
    the `intro` paragraph and the block.
    """
    from shdh.runtime.atomic import atomic_write_text

    path = Path(path)
    intro = f"{intro.strip()}\n\n" if intro.strip() else ""
    fresh = f"# {title}\n\n{intro}{BEGIN_MARK}\n{END_MARK}\n"
    text = path.read_text() if path.is_file() else fresh
    start, end = text.find(BEGIN_MARK), text.find(END_MARK)
    if start < 0 or end < start:
        raise ValueError(
            f"{path}: the markers {BEGIN_MARK!r} ... {END_MARK!r} are missing or out of "
            "order; restore them where the generated tables belong"
        )
    atomic_write_text(path, text[:start] + generated + text[end + len(END_MARK) + 1 :])
    return path


def read_metrics(results_dir: str | Path) -> dict[str, Any]:
    """evaluate's scores, checked down to each method's entry: `shdh results`, the report, the
    MLflow summary and the pipeline's report task all read the file after evaluate wrote it,
    and a damaged or foreign one must name itself, not fail in a table's formatting."""
    path = Path(results_dir) / METRICS_FILE
    metrics = read_json_object(path, "the metrics", hint="run `shdh evaluate`")
    for method, by_bits in metrics.items():
        if not isinstance(by_bits, dict):
            raise ValueError(
                f"{path}: field {method!r}: expected the scores by code length, found a "
                f"{type(by_bits).__name__}; run `shdh evaluate`"
            )
        for bits, row in by_bits.items():
            _check_row(path, method, bits, row)
    return metrics


def _check_row(path: Path, method: str, bits: str, row: Any) -> None:
    """One method and code length's scores: a code length as digits, and a number for each
    metric, so that the tables' formatting never meets anything else."""
    where = f"{path}: field {method!r}.{bits!r}"
    if not bits.isdigit():
        raise ValueError(f"{where}: expected a code length (digits) as the key")
    if not isinstance(row, dict):
        raise ValueError(f"{where}: expected the scores, found a {type(row).__name__}")
    for key, value in row.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(
                f"{where}.{key!r}: expected a number, got {value!r}; run `shdh evaluate`"
            )


def report_from_results(
    results_dir: str | Path, report_path: str | Path, alpha_sweep_path: str | Path | None = None
) -> list[Figure]:
    """`shdh report`: the figures and docs/results.md's tables from a finished evaluation's
    metrics.json and curves.npz, with no ranking again (to restyle a figure, or to refresh the
    document after editing the analysis around its generated block). alpha_sweep: Fig. 5's
    runs (evaluate.alpha_sweep), drawn when the file exists."""
    results_dir = Path(results_dir)
    check_outputs(results_dir, report_path)
    metrics_path = results_dir / METRICS_FILE
    metrics = read_metrics(results_dir)
    curves, dataset, n = load_curves(results_dir / CURVES_FILE)
    unscored = sorted(
        {f"{m}-{b}" for m, b in curves} - {f"{m}-{b}" for m in metrics for b in metrics[m]}
    )
    if unscored:
        raise ValueError(
            f"{metrics_path}: no metrics for {', '.join(unscored)}, which "
            f"{results_dir / CURVES_FILE} has: the two files are from different "
            "runs; rerun `shdh evaluate`"
        )
    figures = write_figures(curves, results_dir / PLOTS_DIR, alpha_sweep(alpha_sweep_path))
    write_report(report_path, metrics, figures, dataset=dataset, n=n)
    return figures


def alpha_sweep(path: str | Path | None) -> list[dict[str, Any]] | None:
    """Fig. 5's runs, when a sweep was saved at evaluate.alpha_sweep. One path that every
    profile can point to, because the sweep is a separate benchmark run
    (benchmarks/shdh_vs_dpsh.py --out), not a product of the pipeline's own fits."""
    return load_alpha_sweep(path) if path is not None and Path(path).is_file() else None


def write_report(
    path: str | Path, metrics: dict[str, Any], figures: list[Figure], *, dataset: str, n: int
) -> Path:
    """Refresh the generated tables and figures of a report such as docs/results.md (the
    analysis around them is kept); figures are linked relative to the document. A new report
    is titled after the dataset and says how it is kept up to date."""
    import os

    path = Path(path)
    links = [(os.path.relpath(f.path, path.parent), f.caption) for f in figures]
    doc = results_doc(metrics, dataset=dataset, n=n, figures=links)
    intro = (
        f"Written by `shdh evaluate` for the dataset {dataset}, from the metrics.json and "
        "curves.npz in the folder of its results (`shdh report` redraws it from them). Each run "
        "rewrites the part between the two markers; text you add around it is kept.\n"
    )
    return update_generated_section(path, doc, title=f"Results: {dataset}", intro=intro)


def check_outputs(results_dir: str | Path, report: str | Path | None) -> None:
    """Fail before any ranking if the results folder or the report's folder cannot be written:
    a read-only folder is named in a second, not after the whole evaluation."""
    check_writable(Path(results_dir) / METRICS_FILE, "evaluate.results_dir")
    if report:
        check_writable(report, "evaluate.report")


def run_report_html(
    metrics: dict[str, Any], figures: Sequence[Figure], *, dataset: str, n: int, title: str
) -> str:
    """One pipeline run's report as a single HTML page, for the parent run's artifacts: MLflow's
    artifact viewer renders HTML but not a markdown file's images, so the figures are embedded
    (base64 PNG) and nothing links outside the run. Every number and figure is this run's."""
    import base64
    import html

    def cell(row: dict[str, Any], column: str) -> str:
        key = f"{column}@{n}"
        return html.escape(_cell(row.get(key), row.get(f"{key}_sd"), 3 if column == "dcg" else 4))

    head = "".join(f"<th>{html.escape(c)}</th>" for c in ["method", "bits", *column_names(n)])
    rows = []
    for family, methods in grouped_methods(metrics):
        span = 2 + len(TABLE_COLUMNS)
        rows.append(f'<tr class="family"><th colspan="{span}">{html.escape(family)}</th></tr>')
        for method in methods:
            for bits in sorted(metrics[method], key=int):
                row = metrics[method][bits]
                cells = "".join(f"<td>{cell(row, c)}</td>" for c in TABLE_COLUMNS)
                rows.append(f"<tr><td>{html.escape(method)}</td><td>{bits}</td>{cells}</tr>")
    images = []
    for figure in figures:
        data = base64.b64encode(Path(figure.path).read_bytes()).decode("ascii")
        caption = html.escape(figure.caption)
        images.append(
            f'<figure><img src="data:image/png;base64,{data}" alt="{caption}">'
            f"<figcaption>{caption}</figcaption></figure>"
        )
    seeds = seeds_line(metrics)
    return "\n".join(
        [
            "<!DOCTYPE html>",
            f"<html><head><meta charset='utf-8'><title>{html.escape(title)}</title>",
            f"<style>{_REPORT_CSS}</style></head><body>",
            f"<h1>{html.escape(title)}</h1>",
            f"<p>Dataset {html.escape(dataset)}, scored at @{n}. NDCG@{n} is normalised by the "
            f"ideal order of the whole database, NDCG_list@{n} by that of the retrieved list "
            "(the paper's NDCG). Random codes are the floor every method must beat.</p>",
            f"<p>{html.escape(seeds)}</p>" if seeds else "",
            f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>",
            "<h2>Figures</h2>",
            *images,
            "</body></html>",
        ]
    )


_REPORT_CSS = (
    "body{font-family:sans-serif;margin:1.5em;max-width:72em}"
    "table{border-collapse:collapse}th,td{border:1px solid #ccc;padding:.2em .6em}"
    "td{text-align:right}td:first-child{text-align:left}"
    "tr.family th{text-align:left;font-style:italic;background:#f4f4f4}"
    "img{max-width:100%}figure{margin:1em 0}figcaption{font-style:italic}"
)
