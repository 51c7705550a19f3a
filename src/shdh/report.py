"""Tables and plots of the results: what `dvc repro` prints and what the docs show."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shdh.atomic import atomic_path

TABLE_COLUMNS = ("acg", "dcg", "ndcg", "ndcg_list", "wr")


def results_table(metrics: dict[str, Any], n: int = 100) -> str:
    """Markdown table: one row per method and code length, the @n metrics as columns.

    `ndcg` uses the ideal order of the whole database (standard); `ndcg_list` re-sorts the
    retrieved list (the paper-compatible variant). Random codes are listed last, as the floor.
    """
    header = f"| method | bits | ACG@{n} | DCG@{n} | NDCG@{n} | NDCG@{n} (list ideal) | WR@{n} |"
    lines = [header, "|---|---:|---:|---:|---:|---:|---:|"]
    methods = sorted(metrics, key=lambda m: (m == "random", m))
    for method in methods:
        for bits in sorted(metrics[method], key=int):
            row = metrics[method][bits]
            cells = [f"{row.get(f'{c}@{n}', float('nan')):.4f}" for c in TABLE_COLUMNS]
            cells[1] = f"{row.get(f'dcg@{n}', float('nan')):.3f}"
            lines.append(f"| {method} | {bits} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def wr_plot(scored: list[Any], path: str | Path, *, title: str) -> Path:
    """Weighted recall against the number retrieved (paper Fig. 3 g-l), one line per method."""
    import matplotlib

    matplotlib.use("Agg")  # headless: no display on pipeline workers
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.5, 4))
    for s in scored:
        wr = s.curves.wr_at_n
        ax.plot(range(1, len(wr) + 1), wr, label=f"{s.method}")
    ax.set_xlabel("number of retrieved items n")
    ax.set_ylabel("weighted recall WR@n")
    ax.set_title(f"Weighted recall, {title}")
    ax.set_ylim(0, 1)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path = Path(path)
    with atomic_path(path, suffix=".png") as tmp:
        fig.savefig(tmp, dpi=110)
    plt.close(fig)
    return path


# ---- docs/results.md: our numbers in the layout of the paper's Table 1 ----------------------

# The paper's row order (Table 1), then anything else we ran, then the random floor.
PAPER_ORDER = ("kmh", "itq", "cosdish+h", "ksh+h", "dpsh", "cosdish", "lfh", "ksh", "shdh")
DISPLAY = {"kmh": "KMH", "itq": "ITQ", "ksh": "KSH", "ksh+h": "KSH+H", "lfh": "LFH",
           "cosdish": "COSDISH", "cosdish+h": "COSDISH+H", "dpsh": "DPSH", "shdh": "SHDH",
           "random": "random codes (floor)"}  # fmt: skip
# Paper Table 1 columns; NDCG is the paper's variant (ideal order of the retrieved list).
_TABLE1_METRICS = (("ACG", "acg", 4), ("DCG", "dcg", 4), ("NDCG", "ndcg_list", 4))
BEGIN_MARK = "<!-- shdh evaluate: generated tables begin -->"
END_MARK = "<!-- shdh evaluate: generated tables end -->"


def _ordered_methods(methods) -> list[str]:
    rank = {m: i for i, m in enumerate(PAPER_ORDER)}
    return sorted(methods, key=lambda m: (m == "random", rank.get(m, len(rank)), m))


def _table1(rows: dict[str, dict[int, dict[str, float | None]]], bits: list[int], n: int,
            metrics=_TABLE1_METRICS) -> str:  # fmt: skip
    """Rows = methods, columns = each metric at each bit length: the paper's Table 1 layout."""
    head = "| method | " + " | ".join(f"{m}@{n} {b}" for m, _, _ in metrics for b in bits) + " |"
    lines = [head, "|---|" + "---:|" * (len(metrics) * len(bits))]
    for method in _ordered_methods(rows):
        cells = []
        for _, key, digits in metrics:
            for b in bits:
                v = rows[method].get(b, {}).get(key)
                cells.append("-" if v is None else f"{v:.{digits}f}")
        lines.append(f"| {DISPLAY.get(method, method)} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def results_doc(metrics: dict[str, Any], *, dataset: str, n: int, plots: dict[int, str]) -> str:
    """The generated part of docs/results.md: this run in Table 1 layout, the paper beside it.

    The paper's numbers are CIFAR-100's (IAPRTC-12's for that dataset): on another dataset only
    the ordering of the methods is comparable, not the values.
    """
    from shdh.paper_results import TABLES

    ours = {m: {int(b): {k.removesuffix(f"@{n}"): v for k, v in row.items()}
                for b, row in by_bits.items()} for m, by_bits in metrics.items()}  # fmt: skip
    bits = sorted({b for by_bits in ours.values() for b in by_bits})
    paper_key = "iaprtc12" if dataset.startswith("iaprtc") else "cifar100"
    paper_bits, paper = TABLES[paper_key]
    paper_rows = {m: {b: {key: vals[i] for key, vals in cols.items()}
                      for i, b in enumerate(paper_bits)} for m, cols in paper.items()}  # fmt: skip
    paper_metrics = (("ACG", "acg", 4), ("DCG", "dcg", 4), ("NDCG", "ndcg", 4))
    paper_name = {"cifar100": "Table 1, CIFAR-100", "iaprtc12": "Table 2, IAPRTC-12"}[paper_key]
    parts = [
        BEGIN_MARK,
        f"### This run: {dataset}, @{n} (written by `shdh evaluate`)\n",
        "NDCG is the paper's variant (normalised by the ideal order of the retrieved list).\n",
        _table1(ours, bits, n),
        f"NDCG@{n} normalised by the ideal order of the whole database (the stricter, standard "
        "form):\n",
        _table1(ours, bits, n, (("NDCG (database ideal)", "ndcg", 4),)),
        f"### The paper ({paper_name}), for reference\n",
        _table1(paper_rows, list(paper_bits), n, paper_metrics),
        "### Weighted recall WR@n (paper Fig. 3 g-i)\n",
        "\n".join(f"- {b} bits: [{Path(p).name}]({p})" for b, p in sorted(plots.items())) + "\n",
        END_MARK,
    ]
    return "\n".join(parts) + "\n"


def update_generated_section(path: str | Path, generated: str, *, title: str) -> Path:
    """Replace the generated block of a hand-edited document, keeping everything around it.

    docs/results.md mixes the tables a run writes with the analysis people write about them;
    rewriting the whole file on every run would erase the analysis. A new file gets a title and
    the block.
    """
    from shdh.atomic import atomic_write_text

    path = Path(path)
    text = path.read_text() if path.is_file() else f"# {title}\n\n{BEGIN_MARK}\n{END_MARK}\n"
    start, end = text.find(BEGIN_MARK), text.find(END_MARK)
    if start < 0 or end < start:
        raise ValueError(
            f"{path}: the markers {BEGIN_MARK!r} ... {END_MARK!r} are missing or out of "
            "order; restore them where the generated tables belong"
        )
    atomic_write_text(path, text[:start] + generated + text[end + len(END_MARK) + 1 :])
    return path
