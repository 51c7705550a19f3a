"""What a setting accepts, as values that describe themselves ("an integer >= 1", "integers >= 1"),
and the dataclass field that carries a setting's check, meaning and default.

Here, below every layer, so that a method's settings dataclass (shdh.hashers.method_settings) and
the loop's declare their checks beside their fields, once; shdh.settings.checks walks a params
file through them. The standard library only: a bare GPU machine that trains imports it too.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

REQUIRED = dataclasses.MISSING  # a setting every params file must give


class Mismatch(Exception):
    """A value does not pass a check; `where` is the position inside it (a list index) and
    `check` the check it failed there (a list's item check for a bad item), for the hint."""

    def __init__(
        self, expected: str, value: Any, where: str = "", check: Check | None = None
    ) -> None:
        super().__init__(expected)
        self.expected, self.value, self.where, self.check = expected, value, where, check


@dataclass(frozen=True)
class Check:
    """What a setting accepts: `noun` ("an integer >= 1"), `nouns` for a list of them."""

    noun: str
    nouns: str
    accepts: Callable[[Any], bool]

    def __call__(self, value: Any) -> Any:
        if not self.accepts(value):
            raise Mismatch(self.noun, value, check=self)
        return value


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value: Any) -> bool:
    return (_is_int(value) or isinstance(value, float)) and math.isfinite(value)


def integer(minimum: int | None = None) -> Check:
    bound = "" if minimum is None else f" >= {minimum}"
    return Check(
        f"an integer{bound}",
        f"integers{bound}",
        lambda v: _is_int(v) and (minimum is None or v >= minimum),
    )


def number(
    low: float | None = None,
    high: float | None = None,
    *,
    open_low: bool = False,
    open_high: bool = False,
) -> Check:
    """A finite int or float in [low, high]; open_low/open_high make an end exclusive."""
    parts = []
    if low is not None:
        parts.append(f"{'>' if open_low else '>='} {low:g}")
    if high is not None:
        parts.append(f"{'<' if open_high else '<='} {high:g}")
    bound = f" {' and '.join(parts)}" if parts else ""

    def accepts(v: Any) -> bool:
        if not _is_number(v):
            return False
        above = low is None or (v > low if open_low else v >= low)
        return above and (high is None or (v < high if open_high else v <= high))

    return Check(f"a number{bound}", f"numbers{bound}", accepts)


BOOL = Check("true or false", "true/false values", lambda v: isinstance(v, bool))
TEXT = Check("a non-empty text", "non-empty texts", lambda v: isinstance(v, str) and bool(v))
SHA256 = Check(
    "64 hex digits",
    "SHA-256 digests",
    lambda v: isinstance(v, str) and re.fullmatch("[0-9a-fA-F]{64}", v) is not None,
)

DEVICE = Check(
    "auto, cpu, cuda or cuda:N",
    "devices",
    lambda v: isinstance(v, str) and re.fullmatch(r"auto|cpu|cuda(:\d+)?", v) is not None,
)


def choice(*values: str) -> Check:
    listed = ", ".join(values)
    return Check(f"one of {listed}", f"values among {listed}", lambda v: v in values)


def optional(check: Check) -> Check:
    return Check(
        f"null or {check.noun}", f"nulls or {check.nouns}", lambda v: v is None or check.accepts(v)
    )


@dataclass(frozen=True)
class ListCheck(Check):
    """A list whose every item passes `item`; errors name the first bad item's index."""

    item: Check = TEXT
    min_len: int = 0
    distinct: bool = False
    nullable: bool = False

    def __call__(self, value: Any) -> Any:
        if value is None and self.nullable:
            return value
        if not isinstance(value, list) or len(value) < self.min_len:
            raise Mismatch(self.noun, value, check=self)
        for i, element in enumerate(value):
            if not self.item.accepts(element):
                raise Mismatch(self.item.noun, element, f"[{i}]", self.item)
        if self.distinct and len(set(value)) != len(value):
            raise Mismatch(f"{self.noun}, each once", value, check=self)
        return value


def list_of(
    item: Check, *, min_len: int = 0, distinct: bool = False, nullable: bool = False
) -> ListCheck:
    noun = f"{'a non-empty list' if min_len else 'a list'} of {item.nouns}"
    noun = f"null or {noun}" if nullable else noun
    return ListCheck(
        noun, f"lists of {item.nouns}", lambda v: True, item, min_len, distinct, nullable
    )


@dataclass(frozen=True)
class SectionCheck(Check):
    """A nested mapping validated against its own section class."""

    cls: type = object
    nullable: bool = False


def section_of(cls: type, *, nullable: bool = False) -> SectionCheck:
    """A nested section; nullable: `null` (or nothing after the key) stands for no settings."""
    return SectionCheck("a mapping of settings", "mappings", lambda v: True, cls, nullable)


def setting(check: Check, doc: str, default: Any = REQUIRED, *, key: str | None = None) -> Any:
    """A section field: its check, its meaning (doc), and its default (REQUIRED: none). `key` is
    the params.yaml spelling where it is not a Python name (ksh+h)."""
    metadata = {"check": check, "doc": doc, "key": key}
    return dataclasses.field(default=default, metadata=metadata)


class Checked:
    """A settings dataclass whose fields check their values when it is made: the schema checks a
    params file, this checks what a notebook, a test or a saved params.json hands a hasher."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            check, value = f.metadata.get("check"), getattr(self, f.name)
            if check is not None and not check.accepts(value):
                raise ValueError(
                    f"{type(self).__name__}.{f.name} must be {check.noun}, got {value!r}"
                )
