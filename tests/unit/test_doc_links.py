"""Every link between the project's Markdown files lands: the file exists, and an anchor names a
heading of it as GitHub renders it. A renamed heading or a moved document otherwise leaves a
link that fails only when a reader follows it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO

DOCUMENTS = sorted(
    [REPO / "README.md", REPO / "benchmarks" / "README.md", *(REPO / "docs").glob("*.md")]
)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)
INLINE_CODE = re.compile(r"`[^`\n]*`")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$", re.M)


def github_anchor(heading: str) -> str:
    """The id GitHub gives a heading: its text lower-cased, without Markdown's code marks and
    link syntax, with every character but letters, digits, spaces, hyphens and underscores
    dropped and each space made a hyphen."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading).replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading's anchor, with GitHub's -1, -2 ... for repeated ones."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for heading in HEADING.findall(FENCE.sub("", path.read_text(encoding="utf-8"))):
        anchor = github_anchor(heading)
        count = seen.get(anchor, 0)
        found.add(anchor if count == 0 else f"{anchor}-{count}")
        seen[anchor] = count + 1
    return found


def local_links(path: Path) -> list[str]:
    """The link targets of a document outside code, leaving out web and mail addresses."""
    text = INLINE_CODE.sub("", FENCE.sub("", path.read_text(encoding="utf-8")))
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z+.-]*:", t)]


def test_github_anchors_are_drawn_as_github_draws_them():
    assert github_anchor("Rerunning evaluate: the score cache (`x/y_z.py`)") == (
        "rerunning-evaluate-the-score-cache-xy_zpy"
    )
    assert github_anchor("3. S-matrix step: 1,000,000 items") == "3-s-matrix-step-1000000-items"
    assert github_anchor("See [serving](serving.md) & more") == "see-serving--more"


def broken_links(document: Path) -> list[str]:
    """The document's local links that miss their file or heading, each with why."""
    broken = []
    for target in local_links(document):
        file_part, _, anchor = target.partition("#")
        linked = (document.parent / file_part).resolve() if file_part else document
        if not linked.exists():
            broken.append(f"{target}: no such file")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            broken.append(f"{target}: {linked.name} has no heading with that anchor")
    return broken


def test_a_missing_file_or_heading_is_found(tmp_path):
    (tmp_path / "other.md").write_text("# Other\n## Same\n## Same\n```\n# not a heading\n```\n")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "[a](other.md#same-1) [b](#top) [c](https://x.org/y#z) `[d](gone.md)`\n# Top\n"
        "[e](gone.md) [f](other.md#same-2) [g](other.md#not-a-heading)\n"
    )
    assert broken_links(doc) == [
        "gone.md: no such file",
        "other.md#same-2: other.md has no heading with that anchor",
        "other.md#not-a-heading: other.md has no heading with that anchor",
    ]


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(REPO)))
def test_every_local_link_lands_on_a_file_and_heading(document):
    broken = broken_links(document)
    assert not broken, f"{document.relative_to(REPO)}:\n  " + "\n  ".join(broken)
