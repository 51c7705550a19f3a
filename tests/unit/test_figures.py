"""The figures of a finished evaluation: saved curves, the PNGs, and `shdh report`."""

from __future__ import annotations

import json

import numpy as np
import pytest
import yaml

from shdh.cli import main
from shdh.core.metrics import Curves
from shdh.reporting.figures import (
    ALPHA_FILE,
    CURVES_FILE,
    FIG4_N,
    load_alpha_sweep,
    load_curves,
    save_curves,
    write_figures,
)
from shdh.reporting.report import BEGIN_MARK, END_MARK, report_from_results
from shdh.settings.profiles import deep_merge, load_params
from tests.conftest import REPO

PNG = b"\x89PNG\r\n\x1a\n"


def _curves(length: int, bits: int, level: float) -> Curves:
    radius = np.arange(bits + 1)
    return Curves(
        wr_at_n=np.linspace(0, level, length),
        radius=radius,
        radius_real=radius * 0.5,
        wr_at_radius=np.linspace(0, 1, bits + 1),
    )


def _run(length: int = 50) -> dict[tuple[str, int], Curves]:
    return {
        (m, b): _curves(length, b, lvl)
        for b in (16, 32)
        for m, lvl in (("shdh", 0.9), ("itq", 0.6), ("random", 0.1))
    }


def _row(x: float) -> dict[str, float]:
    return {"acg@100": x, "dcg@100": 10 * x, "ndcg@100": x / 3, "ndcg_list@100": x / 2}


def test_curves_round_trip(tmp_path):
    curves = _run()
    path = save_curves(tmp_path / "r" / CURVES_FILE, curves, dataset="fashion-mnist-h", n=100)
    loaded, dataset, n = load_curves(path)
    assert (dataset, n) == ("fashion-mnist-h", 100) and loaded.keys() == curves.keys()
    for key, c in curves.items():
        for field in ("wr_at_n", "radius", "radius_real", "wr_at_radius"):
            np.testing.assert_array_equal(getattr(loaded[key], field), getattr(c, field))
    assert [p.name for p in path.parent.iterdir()] == [CURVES_FILE]  # no temporary left


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        ({"n": np.array(100)}, "field 'dataset' is missing"),
        (
            {"dataset": np.array("d"), "n": np.array(1), "shdh/x/wr_at_n": np.zeros(3)},
            "field 'shdh/x/wr_at_n' is not METHOD/BITS/",
        ),
        (
            {"dataset": np.array("d"), "n": np.array(1), "shdh/16/wr_at_n": np.zeros(3)},
            "field 'shdh/16/radius' is missing",
        ),
    ],
)
def test_bad_curves_files_are_named_with_the_field(tmp_path, arrays, message):
    path = tmp_path / CURVES_FILE
    np.savez(path, **arrays)
    with pytest.raises(ValueError, match=f"{CURVES_FILE}: {message}"):
        load_curves(path)


def test_an_unreadable_curves_file_says_to_rerun_evaluate(tmp_path):
    path = tmp_path / CURVES_FILE
    path.write_bytes(b"not an npz")
    with pytest.raises(ValueError, match="cannot read the saved curves.*shdh evaluate"):
        load_curves(path)


def test_every_figure_is_written_with_a_caption(tmp_path):
    figures = write_figures(_run(), tmp_path / "plots")
    names = [f.path.name for f in figures]
    assert names == [
        "wr_by_radius-16.png",
        "wr_by_radius-32.png",
        "wr_at_n-16.png",
        "wr_at_n-32.png",
        "wr_vs_bits.png",
    ]
    assert all(f.path.read_bytes()[:8] == PNG for f in figures)
    assert figures[0].caption.startswith("Fig. 3 (a-f)") and "16 bits" in figures[0].caption
    assert figures[2].caption.startswith("Fig. 3 (g-l)") and "n = 1..50" in figures[2].caption
    # Fig. 4 at the longest depth the curves allow, and the caption says so.
    assert figures[4].caption.startswith("Fig. 4: WR@50 against the code length")
    assert f"needs evaluate.curve_max >= {FIG4_N}" in figures[4].caption
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == sorted(names)


def test_fig4_at_the_papers_depth_when_the_curves_reach_it(tmp_path):
    figures = write_figures(_run(length=FIG4_N), tmp_path)
    assert figures[-1].caption == f"Fig. 4: WR@{FIG4_N} against the code length."


def _results(tmp_path, curves=None):
    results = tmp_path / "results"
    metrics = {
        m: {str(b): _row(x) for b in (16, 32)}
        for m, x in (("shdh", 2.0), ("itq", 1.0), ("random", 0.5))
    }
    results.mkdir()
    (results / "metrics.json").write_text(json.dumps(metrics))
    save_curves(results / CURVES_FILE, curves or _run(), dataset="fashion-mnist-h", n=100)
    return results


def test_report_redraws_figures_and_keeps_the_analysis(tmp_path):
    results = _results(tmp_path)
    doc = tmp_path / "docs" / "results.md"
    doc.parent.mkdir()
    doc.write_text(f"# Results\n\n{BEGIN_MARK}\nstale tables\n{END_MARK}\n\n## Analysis\nby hand\n")
    figures = report_from_results(results, doc)
    text = doc.read_text()
    assert "stale tables" not in text and text.endswith("## Analysis\nby hand\n")
    assert "| SHDH | 2.0000 | 2.0000 |" in text
    for f in figures:
        assert f"![{f.caption}](../results/plots/{f.path.name})" in text
        assert f.path.parent == results / "plots" and f.path.read_bytes()[:8] == PNG


def test_report_refuses_curves_from_another_run(tmp_path):
    curves = {**_run(), ("ksh", 16): _curves(50, 16, 0.7)}
    results = _results(tmp_path, curves)
    doc = tmp_path / "results.md"
    with pytest.raises(ValueError, match=r"metrics.json: no metrics for ksh-16.*different runs"):
        report_from_results(results, doc)
    assert not doc.exists() and not (results / "plots").exists()


def test_shdh_report_command(tmp_path, capsys, caplog):
    results = _results(tmp_path)
    params = tmp_path / "params.yaml"
    report = tmp_path / "out.md"
    settings = deep_merge(
        load_params(REPO / "params.yaml"),
        {"evaluate": {"results_dir": str(results), "n": 100, "report": str(report)}},
    )
    params.write_text(yaml.safe_dump(settings))
    assert main(["report", "--params", str(params)]) == 0
    assert "wr_vs_bits.png" in capsys.readouterr().out and "| SHDH |" in report.read_text()
    (results / "metrics.json").unlink()
    assert main(["report", "--params", str(params)]) == 1
    assert f"{results / 'metrics.json'}: no such file, expected the metrics" in caplog.text
    # `shdh results` on a file cut short: the same one line, not a JSONDecodeError's trace
    (results / "metrics.json").write_text('{"shdh": {"16": {"acg@100"')
    caplog.clear()
    assert main(["results", "--params", str(params)]) == 1
    assert f"{results / 'metrics.json'}: cannot read the metrics (" in caplog.text
    assert "Traceback" not in caplog.text


def _sweep_row(variant: str, seed: int, ndcg: float) -> dict:
    return {
        "variant": variant,
        "seed": seed,
        "bits": 64,
        "ndcg@100": ndcg,
        "ndcg_list@100": ndcg + 0.1,
    }


@pytest.mark.slow  # draws every figure three times
def test_fig5_comes_from_a_saved_alpha_sweep(tmp_path):
    rows = [
        _sweep_row(f"shdh:alpha={a}", s, 0.7 + 0.01 * s + a / 100)
        for a in (0.25, 1, 4)
        for s in (0, 1, 2)
    ]
    rows.append(_sweep_row("dpsh", 0, 0.8))  # other variants of the benchmark are left out
    results = _results(tmp_path)
    sweep_path = tmp_path / "elsewhere" / ALPHA_FILE  # evaluate.alpha_sweep, not in results_dir
    sweep_path.parent.mkdir()
    sweep_path.write_text(json.dumps(rows))
    report = tmp_path / "results.md"
    without = [f.path.name for f in report_from_results(results, report)]
    missing = [f.path.name for f in report_from_results(results, report, tmp_path / "none.json")]
    assert "alpha.png" not in without and missing == without  # no file: no Fig. 5, no error
    figures = report_from_results(results, report, sweep_path)
    fig5 = figures[-1]
    assert fig5.path.name == "alpha.png" and fig5.path.read_bytes()[:8] == PNG
    assert fig5.caption.startswith("Fig. 5:") and "64 bits" in fig5.caption
    sweep = load_alpha_sweep(sweep_path)
    assert sorted({r["alpha"] for r in sweep}) == [0.25, 1.0, 4.0] and len(sweep) == 9


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{}", "expected a list of runs"),
        (json.dumps([{"variant": "dpsh", "seed": 0}]), "no 'shdh:alpha=...' runs"),
        (
            json.dumps([{"variant": "shdh:alpha=1", "ndcg@100": 0.5}]),
            "run 0 \\(shdh:alpha=1\\): field 'ndcg_list@100' is missing",
        ),
        ("not json", "cannot read the alpha sweep"),
    ],
)
def test_a_bad_alpha_sweep_is_named(tmp_path, content, message):
    path = tmp_path / ALPHA_FILE
    path.write_text(content)
    with pytest.raises(ValueError, match=f"{ALPHA_FILE}: {message}"):
        load_alpha_sweep(path)


def test_with_every_method_the_lines_are_told_apart_and_listed_by_family(tmp_path):
    """Twenty methods and the floor on one figure: a family shares a colour, its methods differ
    by marker and line style, no two lines look alike, and the lines (so the legend, which
    lists them under a heading per family) come family by family in the catalogue's order."""
    from shdh.hashers import method_catalogue
    from shdh.reporting.figures import _method_lines, wr_vs_bits_figure

    names = [m.name for m in method_catalogue.METHODS] + ["random"]
    curves = {(m, b): _curves(50, b, 0.1 + i / 30) for i, m in enumerate(names) for b in (16, 32)}
    lines = _method_lines(names[::-1], lambda m: ([16, 32], [0.1, 0.2]))
    family = {m.name: m.family for m in method_catalogue.METHODS}
    family["random"] = method_catalogue.REFERENCE
    titles = {m.title: m.name for m in method_catalogue.METHODS} | {"random codes": "random"}
    drawn = [titles[line.label] for line in lines]
    assert sorted(drawn) == sorted(names)
    assert [line.group for line in lines] == [family[m] for m in drawn]
    groups = list(dict.fromkeys(line.group for line in lines))
    assert groups == list(method_catalogue.families())
    for group in groups:
        members = [line for line in lines if line.group == group]
        expected = [m.name for m in method_catalogue.METHODS if m.family == group]
        assert [titles[line.label] for line in members][: len(expected)] == expected
        if group != method_catalogue.REFERENCE:
            assert len({line.style["color"] for line in members}) == 1, group
    looks = {(ln.style["color"], ln.style["marker"], str(ln.style["linestyle"])) for ln in lines}
    assert len(looks) == len(lines)
    assert len({line.style["color"] for line in lines}) == len(groups)
    path, _ = wr_vs_bits_figure(curves, tmp_path / "wr_vs_bits.png")
    assert path.read_bytes()[:8] == PNG


def test_long_curves_carry_a_few_staggered_markers():
    from shdh.reporting.figures import _method_lines

    lines = _method_lines(["shdh", "hpdh", "random"], lambda m: (np.arange(800), np.zeros(800)))
    every = [line.style.get("markevery") for line in lines]
    assert every[0][1] == every[1][1] == 100 and every[0][0] != every[1][0]
    assert lines[2].style["linestyle"] == ":" and lines[2].style["marker"] == ""
