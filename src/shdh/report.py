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
