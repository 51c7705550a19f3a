"""The results table and the generated block of docs/results.md."""

from __future__ import annotations

import pytest

from shdh.reporting.report import (
    BEGIN_MARK,
    END_MARK,
    results_doc,
    results_table,
    update_generated_section,
)


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
    # each family under its heading row; the random floor last, with the reference rows
    assert [line.split("|")[1].strip() for line in lines[2:]] == [
        "*hierarchical, deep*",
        "shdh",
        "shdh",
        "*reference*",
        "random",
    ]
    assert lines[2] == "| *hierarchical, deep* |" + " |" * 6
    assert lines[3].split("|")[2].strip() == "32"
    assert "| 2.5000 | 54.321 | 0.8600 | 0.9600 | 0.0040 |" in lines[3]


def _row(acg: float, ndcg_list: float) -> dict[str, float]:
    return {
        "acg@100": acg,
        "dcg@100": 10 * acg,
        "ndcg@100": ndcg_list - 0.1,
        "ndcg_list@100": ndcg_list,
        "wr@100": 0.01,
    }


def test_results_doc_has_the_paper_table_1_layout_beside_the_paper():
    metrics = {
        "random": {"32": _row(0.8, 0.6)},
        "shdh": {"32": _row(2.5, 0.96), "64": _row(2.6, 0.97)},
        "kmh": {"32": _row(1.5, 0.8)},
    }
    figure = ("../p/wr-32.png", "Fig. 3 (g-l): WR@n, 32 bits.")
    doc = results_doc(metrics, dataset="fashion-mnist-h", n=100, figures=[figure])
    ours = doc.split("### This run")[1].split("\n\n")[2].splitlines()
    assert ours[0] == (
        "| method | ACG@100 32 | ACG@100 64 | DCG@100 32 | DCG@100 64 | NDCG_list@100 32 "
        "| NDCG_list@100 64 |"
    )
    # family by family, random codes after every method; blanks as "-"
    assert [r.split("|")[1].strip() for r in ours[2:]] == [
        "*unsupervised, shallow*",
        "KMH",
        "*hierarchical, deep*",
        "SHDH",
        "*reference*",
        "random codes (floor)",
    ]
    assert ours[3].split("|")[2:8] == [" 1.5000 ", " - ", " 15.0000 ", " - ", " 0.8000 ", " - "]
    paper = doc.split("### The paper (Table 1, CIFAR-100)")[1]
    assert "| SHDH | 0.5225 | 0.5724 | 0.6084 | 12.7460 | 13.9575 | 14.7861 | 0.6141 |" in paper
    assert "| KMH | 0.2023 | - | 0.2261 |" in paper
    # each figure: the image, then its caption line
    assert (
        "![Fig. 3 (g-l): WR@n, 32 bits.](../p/wr-32.png)\n\n*Fig. 3 (g-l): WR@n, 32 bits.*" in doc
    )
    iapr = results_doc(metrics, dataset="iaprtc12", n=100)
    assert "Table 2, IAPRTC-12" in iapr and "ACG@100 128" in iapr and "![" not in iapr


def test_results_doc_sets_the_peers_metrics_beside_the_papers_when_the_run_has_them():
    peers = {"map@1000": 0.71, "map@all": 0.52, "mahp@2500": 0.83}
    metrics = {"shdh": {"32": {**_row(2.5, 0.96), **peers}}, "kmh": {"32": _row(1.5, 0.8)}}
    doc = results_doc(metrics, dataset="fashion-mnist-h", n=100)
    table = doc.split("mAHP@R with shared levels as relevance (HPDH):")[1].split("\n\n")[1]
    lines = table.splitlines()
    assert lines[0] == "| method | mAP@1000 32 | mAP@all 32 | mAHP@2500 32 |"
    assert lines[2:] == [
        "| *unsupervised, shallow* | | | |",
        "| KMH | - | - | - |",
        "| *hierarchical, deep* | | | |",
        "| SHDH | 0.7100 | 0.5200 | 0.8300 |",
    ]
    older = results_doc({"shdh": {"32": _row(2.5, 0.96)}}, dataset="fashion-mnist-h", n=100)
    assert "mAP@" not in older  # a metrics.json from before these metrics: no empty table


def test_update_generated_section_keeps_the_hand_written_analysis(tmp_path):
    path = tmp_path / "results.md"
    update_generated_section(path, f"{BEGIN_MARK}\nfirst\n{END_MARK}\n", title="Results")
    text = path.read_text()
    assert text.startswith("# Results\n") and "first" in text
    path.write_text(text + "\n## Analysis\nwritten by hand\n")
    update_generated_section(path, f"{BEGIN_MARK}\nsecond\n{END_MARK}\n", title="Results")
    text = path.read_text()
    assert "second" in text and "first" not in text
    assert text.endswith("## Analysis\nwritten by hand\n")
    assert text.count(BEGIN_MARK) == 1 and text.count(END_MARK) == 1


def test_update_generated_section_refuses_a_file_without_markers(tmp_path):
    path = tmp_path / "results.md"
    path.write_text("# Results\nno markers here\n")
    with pytest.raises(ValueError, match="results.md: the markers"):
        update_generated_section(path, "x", title="Results")
    assert path.read_text() == "# Results\nno markers here\n"


def test_the_papers_claims_are_checked_against_this_run():
    metrics = {
        "shdh": {"32": _row(2.0, 0.9), "64": _row(3.0, 0.9)},
        "dpsh": {"32": _row(1.0, 0.8), "64": _row(4.0, 0.8)},
        "ksh": {"32": _row(1.0, 0.5)},
        "ksh+h": {"32": _row(0.5, 0.4)},
        "dpsh+h": {"32": _row(1.5, 0.7), "64": _row(5.0, 0.9)},
        "hashnet+h": {"32": _row(1.5, 0.7)},
    }
    doc = results_doc(metrics, dataset="fashion-mnist-h", n=100)
    rows = {
        tuple(c.strip() for c in line.split("|")[1:3]): line.split("|")[3:6]
        for line in doc.split("### The paper's claims")[1].splitlines()
        if line.startswith("| ") and "claim" not in line
    }
    # SHDH's ACG: +100% at 32 bits, -25% at 64; the paper's CIFAR-100 ratios beside them.
    assert [c.strip() for c in rows[("SHDH over DPSH", "ACG")]] == [
        "+100.0% / -25.0%",
        "+12.5% / +15.1% / +18.4%",
        "partly",
    ]
    assert rows[("SHDH over DPSH", "NDCG_list")][2].strip() == "yes"  # 0.9 / 0.8, list ideal
    assert rows[("KSH+H over KSH", "ACG")][2].strip() == "no"
    # best deep (SHDH's 2.0 at 32 bits) over best shallow (KSH; nothing at 64 bits)
    assert rows[("best deep over best shallow", "ACG")][0].strip() == "+100.0% / -"
    assert ("COSDISH+H over COSDISH", "ACG") not in rows  # neither was run
    # the deep +H variants over their plain methods; the paper ran neither side
    assert [c.strip() for c in rows[("DPSH+H over DPSH", "ACG")]] == [
        "+50.0% / +25.0%",
        "- / - / -",
        "yes",
    ]
    assert ("HashNet+H over HashNet", "ACG") not in rows  # its plain side was not run


def test_the_claims_groups_are_every_declared_method_but_the_reference_by_kind(monkeypatch) -> None:
    """Each method joins the "best deep / best shallow" claim by its declared kind: a method is
    never left out of it silently. The oracle is a bound to compare with, not a hashing method,
    so it is in neither group; a method declared later joins the group of its kind."""
    from shdh.hashers import method_catalogue
    from shdh.reporting import report
    from tests.unit.toy_catalogue_entries import ToySettings

    _, deep, shallow = report.claims()[-1]
    declared = method_catalogue.by_name()
    assert set(deep) | set(shallow) == set(declared) - {"oracle"}
    assert all(declared[m].deep for m in deep) and not any(declared[m].deep for m in shallow)
    toy = method_catalogue.Method("toy", "shallow", "tests.unit.toys", "Toy", ToySettings, "Toy")
    monkeypatch.setattr(method_catalogue, "METHODS", (*method_catalogue.METHODS, toy))
    assert report.claims()[-1][2] == (*shallow, "toy")


def test_every_declared_method_has_a_family_and_the_families_have_an_order() -> None:
    from shdh.hashers import method_catalogue
    from tests.unit.toy_catalogue_entries import ToySettings

    families = method_catalogue.families()
    assert families == tuple(f for f in method_catalogue.FAMILIES if f in families)
    assert method_catalogue.OTHER not in families  # every built-in method says its family
    assert families[-1] == method_catalogue.REFERENCE
    for m in method_catalogue.METHODS:
        assert m.reference == (m.family == method_catalogue.REFERENCE), m.name
        assert m.family.endswith(f", {m.kind}") or m.reference, m.name  # a network or not
    toy = method_catalogue.Method("toy", "shallow", "tests.unit.toys", "Toy", ToySettings, "Toy")
    assert toy.family == method_catalogue.OTHER
    with pytest.raises(ValueError, match="method 'toy': family must be one of"):
        method_catalogue.Method(
            "toy", "shallow", "tests.unit.toys", "Toy", ToySettings, "Toy", family="pairs"
        )
    with pytest.raises(ValueError, match="family 'reference' is for bounds"):
        method_catalogue.Method(
            "toy", "deep", "tests.unit.toys", "Toy", ToySettings, "Toy", family="reference"
        )


def _first_cells(table: str) -> list[str]:
    return [line.split("|")[1].strip() for line in table.splitlines()[2:]]


def test_the_tables_group_every_method_run_by_family_in_the_catalogues_order() -> None:
    """With every declared method in a run (and metrics.json's keys in any order) the rows come
    family by family, in FAMILIES' order, each family's methods in declaration order; a family
    none of whose methods ran has no heading, and a method not run has no row."""
    from shdh.hashers import method_catalogue

    left_out = {"lfh", "csq", "greedyhash", "orthohash"}  # the centres family: none of it ran
    run = [m for m in method_catalogue.METHODS if m.name not in left_out]
    metrics = {m.name: {"32": _row(1.0, 0.5)} for m in reversed(run)}
    metrics["random"] = {"32": _row(0.1, 0.1)}
    expected = []
    for family in method_catalogue.FAMILIES:
        names = [m.name for m in run if m.family == family]
        if family == method_catalogue.REFERENCE:
            names.append("random")
        if names:
            expected += [f"*{family}*", *names]
    assert f"*{method_catalogue.CENTRES_DEEP}*" not in expected
    assert _first_cells(results_table(metrics)) == expected
    doc = results_doc(metrics, dataset="fashion-mnist-h", n=100)
    ours = doc.split("### This run")[1].split("\n\n")[2]
    titles = {m.name: m.title for m in run} | {"random": "random codes (floor)"}
    assert _first_cells(ours) == [titles.get(cell, cell) for cell in expected]
    assert "*classes and centres, deep*" not in doc.split("### The paper")[0]


def test_a_method_with_no_declaration_is_shown_under_other() -> None:
    """A name the catalogue no longer declares (a metrics.json from an older checkout) keeps its
    rows, under its own name, after the declared families and before the reference rows."""
    metrics = {"random": {"32": _row(0.1, 0.1)}, "gone": {"32": _row(1.0, 0.5)}}
    metrics["itq"] = {"32": _row(1.0, 0.5)}
    assert _first_cells(results_table(metrics)) == [
        "*unsupervised, shallow*",
        "itq",
        "*other*",
        "gone",
        "*reference*",
        "random",
    ]


def test_every_hierarchical_variant_is_claimed_over_its_plain_method() -> None:
    from shdh.hashers import method_catalogue
    from shdh.reporting import report

    over_plain = {name: (better, worse) for name, better, worse in report.claims()[1:-1]}
    variants = [m for m in method_catalogue.METHODS if m.name.endswith("+h")]
    assert [v.title for v in variants] == ["KSH+H", "COSDISH+H", "DPSH+H", "HashNet+H"]
    assert over_plain == {
        f"{v.title} over {v.title.removesuffix('+H')}": ((v.name,), (v.name[:-2],))
        for v in variants
    }


def test_the_html_report_groups_its_rows_by_family(tmp_path) -> None:
    from shdh.reporting.report import run_report_html

    metrics = {"shdh": {"16": _row(2.0, 0.9)}, "itq": {"16": _row(1.0, 0.5)}}
    page = run_report_html(metrics, [], dataset="d", n=100, title="t")
    itq, shdh = page.index("<td>itq</td>"), page.index("<td>shdh</td>")
    assert page.index('<th colspan="7">unsupervised, shallow</th>') < itq
    assert itq < page.index('<th colspan="7">hierarchical, deep</th>') < shdh
