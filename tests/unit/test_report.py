"""The results table and the weighted-recall plot."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shdh.report import results_table, wr_plot


def test_results_table_lists_methods_then_the_random_floor():
    row = {
        "acg@100": 2.5,
        "dcg@100": 54.321,
        "ndcg@100": 0.86,
        "ndcg_list@100": 0.96,
        "wr@100": 0.004,
    }
    table = results_table({"random": {"64": row}, "shdh": {"64": row, "32": row}})
    lines = table.splitlines()
    assert lines[0].startswith("| method | bits | ACG@100")
    assert [line.split("|")[1].strip() for line in lines[2:]] == ["shdh", "shdh", "random"]
    assert lines[2].split("|")[2].strip() == "32"
    assert "| 2.5000 | 54.321 | 0.8600 | 0.9600 | 0.0040 |" in lines[2]


def test_wr_plot_writes_a_png(tmp_path):
    @dataclass
    class Curves:
        wr_at_n: np.ndarray

    @dataclass
    class Scored:
        method: str
        curves: Curves

    path = wr_plot(
        [Scored("shdh", Curves(np.linspace(0, 1, 50)))], tmp_path / "p" / "wr.png", title="64 bits"
    )
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in path.parent.iterdir()] == ["wr.png"]
