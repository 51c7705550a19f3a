"""SAIAPR TC-12's annotation files, read and checked line by line: wlist.txt (label id -> name),
labels.txt (image, region, label) and ontology_path.txt (each region's concept chain from the
root). Every malformed line is refused with the file and the line named. shdh.data.iaprtc12 turns
them into the dataset.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from shdh.core.hierarchy import LabelTree
from shdh.data.dataset import LABEL_SEP
from shdh.data.idx import DataFormatError

ROOT_NAME = "entity"


@dataclass(frozen=True)
class Region:
    """One labelled region, and where it was read (for error messages)."""

    image_id: int
    region_id: int
    label_id: int
    file: Path
    line: int


def _lines(path: Path) -> Iterable[tuple[int, str]]:
    """(1-based line number, stripped text) of every non-blank line."""
    if not path.is_file():
        raise DataFormatError(f"{path}: missing")
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            text = line.strip()
            if text:
                yield number, text


def _int(token: str, field: str, path: Path, line: int) -> int:
    try:
        return int(token)
    except ValueError:
        raise DataFormatError(f"{path}:{line}: {field}: {token!r} is not an integer") from None


def _check_name(name: str, path: Path, line: int) -> str:
    if "/" in name or LABEL_SEP in name:
        raise DataFormatError(f"{path}:{line}: name {name!r} contains '/' or {LABEL_SEP!r}")
    return name


def read_wlist(path: str | os.PathLike[str]) -> dict[int, str]:
    """label_id -> concept name from wlist.txt ("label_id<TAB>name" lines)."""
    path = Path(path)
    vocabulary: dict[int, str] = {}
    for line, text in _lines(path):
        fields = text.split(None, 1)
        if len(fields) != 2:
            raise DataFormatError(f"{path}:{line}: expected 'label_id<TAB>name', got {text!r}")
        label_id = _int(fields[0], "label_id", path, line)
        name = _check_name(fields[1].strip(), path, line)
        if label_id in vocabulary:
            raise DataFormatError(
                f"{path}:{line}: label_id {label_id} defined twice ({vocabulary[label_id]!r} "
                f"and {name!r})"
            )
        vocabulary[label_id] = name
    if not vocabulary:
        raise DataFormatError(f"{path}: no labels")
    return vocabulary


def read_labels(path: str | os.PathLike[str], vocabulary: dict[int, str]) -> list[Region]:
    """Regions of one labels.txt; a label id missing from wlist.txt is an error."""
    path = Path(path)
    regions = []
    for line, text in _lines(path):
        fields = text.split()
        if len(fields) != 3:
            raise DataFormatError(
                f"{path}:{line}: expected 'image_id region_id label_id', got {text!r}"
            )
        image_id, region_id, label_id = (
            _int(tok, field, path, line)
            for tok, field in zip(fields, ("image_id", "region_id", "label_id"), strict=True)
        )
        if label_id not in vocabulary:
            raise DataFormatError(
                f"{path}:{line}: label_id {label_id} is not in wlist.txt ({len(vocabulary)} labels)"
            )
        regions.append(Region(image_id, region_id, label_id, path, line))
    return regions


def parse_chain(text: str, path: Path, line: int) -> tuple[str, ...]:
    """Node names of one ontology chain, root first: "entity->->_a->_b" -> ("entity", "a", "b")."""
    steps = [step.strip().strip("'\"").strip().lstrip("_") for step in text.split("->")]
    names = tuple(_check_name(step, path, line) for step in steps if step)
    if not names or names[0] != ROOT_NAME:
        raise DataFormatError(f"{path}:{line}: chain {text!r} does not start at {ROOT_NAME!r}")
    if len(set(names)) != len(names):
        raise DataFormatError(f"{path}:{line}: chain {text!r} names a node twice")
    return names


@dataclass
class Ontology:
    """Parent of every concept, with the chain and line that first gave it (for errors)."""

    parent: dict[str, str]
    source: dict[str, tuple[str, Path, int]]

    def path(self, name: str) -> str:
        """Label path below the root, "landscape-nature/sky/sky-blue"; "" for the root."""
        parts = []
        while name != ROOT_NAME:
            parts.append(name)
            name = self.parent[name]
        return "/".join(reversed(parts))

    def tree(self) -> LabelTree:
        """The label tree; nodes of a level are ordered by their path (deterministic)."""
        return LabelTree.from_paths(sorted(self.path(n) for n in self.parent), root=ROOT_NAME)


def read_ontology(paths: Iterable[str | os.PathLike[str]]) -> Ontology:
    """Merge the chains of every ontology_path.txt; a node given two parents is an error."""
    ontology = Ontology(parent={}, source={})
    for file in paths:
        file = Path(file)
        for line, text in _lines(file):
            fields = text.split(None, 2)
            if len(fields) != 3:
                raise DataFormatError(
                    f"{file}:{line}: expected 'image_id region_id chain', got {text!r}"
                )
            _int(fields[0], "image_id", file, line)
            _int(fields[1], "region_id", file, line)
            chain = parse_chain(fields[2], file, line)
            for parent, child in zip(chain, chain[1:], strict=False):
                known = ontology.parent.get(child)
                if known is None:
                    ontology.parent[child] = parent
                    ontology.source[child] = (fields[2], file, line)
                elif known != parent:
                    chain0, file0, line0 = ontology.source[child]
                    raise DataFormatError(
                        f"{file}:{line}: node {child!r} has parent {parent!r} in chain "
                        f"{fields[2]!r}, but parent {known!r} in chain {chain0!r} "
                        f"({file0}:{line0})"
                    )
    if not ontology.parent:
        raise DataFormatError("ontology_path.txt files hold no chain below the root")
    return ontology
