"""Settings of the evaluate step that do not need a fitted model: threads and the results doc."""

from __future__ import annotations

import pytest

from shdh.reporting.figures import Figure
from shdh.reporting.report import write_report
from shdh.runtime.cpu_quota import available_cpus
from shdh.steps.score import eval_workers


def test_eval_workers_defaults_to_one_thread_per_usable_cpu():
    assert eval_workers(None) == available_cpus()
    assert eval_workers(3) == 3


@pytest.mark.parametrize("bad", [0, -2, 1.5, True, "2"])
def test_eval_workers_refuses_anything_but_a_positive_int(bad):
    with pytest.raises(ValueError, match="evaluate.workers"):
        eval_workers(bad)


def test_write_report_links_the_figures_relative_to_the_document(tmp_path):
    row = {"acg@100": 2.0, "dcg@100": 40.0, "ndcg@100": 0.8, "ndcg_list@100": 0.9}
    doc = tmp_path / "docs" / "results.md"
    plot = Figure(tmp_path / "results" / "plots" / "wr_at_n-64.png", "Fig. 3 (g-l): 64 bits.")
    write_report(doc, {"shdh": {"64": row}}, [plot], dataset="fashion-mnist-h", n=100)
    text = doc.read_text()
    assert "![Fig. 3 (g-l): 64 bits.](../results/plots/wr_at_n-64.png)" in text
    assert "| SHDH | 2.0000 | 40.0000 | 0.9000 |" in text
