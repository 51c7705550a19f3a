"""The value checks of the settings schema, and the walk that applies them to a section.

A check knows how to describe what it accepts ("an integer >= 1", "integers >= 1"), so every
error reads the same way: the file, the dotted key, what was expected and the value found, on one
line. Sections are frozen dataclasses whose fields carry their check and their meaning in the
field metadata (see `setting`), so one walk validates every section, nested ones included.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import yaml

from shdh.runtime.errors import ConfigError

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


def with_checks(
    core: type,
    doc: str,
    checks: Mapping[str, tuple[Check, str]],
    extra: list[tuple[str, Any, Any]] | None = None,
    *,
    name: str | None = None,
) -> type:
    """A section class made of a core settings dataclass (shdh.training.loop_settings.LoopSettings,
    a method's params): each of its fields with its type and default as the core writes them, and
    the check and meaning `checks` gives it; plus `extra` fields (name, type, setting(...)). A field
    without a check, or a check without a field, is refused here, when the schema is built."""
    core_fields = {f.name: f for f in dataclasses.fields(core)}
    if set(checks) != set(core_fields):
        raise TypeError(
            f"{core.__name__}: checks for {sorted(checks)} but fields {sorted(core_fields)}"
        )
    own = [
        (key, f.type, setting(checks[key][0], checks[key][1], f.default))
        for key, f in core_fields.items()
    ]
    cls = dataclasses.make_dataclass(
        name or core.__name__, own + list(extra or []), frozen=True, kw_only=True
    )
    cls.__doc__ = doc
    return cls


def yaml_key(field: dataclasses.Field) -> str:
    return field.metadata.get("key") or field.name


def show(value: Any) -> str:
    """A value as params.yaml would spell it, so the message can be compared with the file."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value)
    return str(value)


def _passes(check: Check, value: Any) -> bool:
    try:
        check(value)
    except Mismatch:
        return False
    return True


def _as_yaml(text: str) -> Any:
    """What YAML makes of `text` as a flow list ("16, 32" -> [16, 32]); None if it cannot."""
    try:
        return yaml.safe_load(f"[{text}]")
    except yaml.YAMLError:
        return None


def _hint(check: Check | None, value: Any) -> str:
    """The likely fix, where the mistake is a common one. A hint only ever suggests a value that
    `check` accepts: one that would fail again is worse than none."""
    if check is None:
        return ""
    if isinstance(value, str) and "number" in check.noun:
        try:
            number = float(value)  # PyYAML reads 1e-3 (no dot) as a string
        except ValueError:
            number = None
        if number is not None and _passes(check, number):
            return " (YAML read it as text: write numbers like 1e-3 as 1.0e-3)"
    if isinstance(check, ListCheck) and not isinstance(value, list | dict) and value is not None:
        candidates = [[value]] + ([_as_yaml(value)] if isinstance(value, str) else [])
        for candidate in candidates:
            if isinstance(candidate, list) and _passes(check, candidate):
                return f" (write a list: [{', '.join(map(show, candidate))}])"
        return ""
    if check.noun.startswith("one of ") and isinstance(value, str):
        close = difflib.get_close_matches(value, check.noun[7:].split(", "), n=1, cutoff=0.6)
        return f"; did you mean {close[0]}?" if close and _passes(check, close[0]) else ""
    return ""


def parse_section(cls: type, mapping: Any, where: str, source: str) -> Any:
    """An instance of section class `cls` from `mapping`, or a ConfigError naming the source,
    the dotted key, what was expected and the value."""
    if not isinstance(mapping, Mapping):
        raise ConfigError(f"{source}: {where}: expected a mapping of settings, got {show(mapping)}")
    fields = {yaml_key(f): f for f in dataclasses.fields(cls) if f.init}
    for key in mapping:
        if key not in fields:
            raise ConfigError(f"{source}: {unknown_key(key, list(fields), where)}")
    values = {}
    for key, field in fields.items():
        dotted = f"{where}.{key}" if where else str(key)
        if key not in mapping:
            if field.default is REQUIRED and field.default_factory is REQUIRED:
                raise ConfigError(f"{source}: missing setting {dotted} ({field.metadata['doc']})")
            continue
        values[field.name] = check_value(field.metadata["check"], mapping[key], dotted, source)
    return cls(**values)


def check_value(check: Check, value: Any, dotted: str, source: str) -> Any:
    if isinstance(check, SectionCheck):
        if value is None and check.nullable:
            return None
        return parse_section(check.cls, value, dotted, source)
    try:
        return check(value)
    except Mismatch as bad:
        raise ConfigError(
            f"{source}: {dotted}{bad.where}: expected {bad.expected}, got {show(bad.value)}"
            f"{_hint(bad.check, bad.value)}"
        ) from None


def unknown_key(key: Any, known: list[str], where: str) -> str:
    """'unknown setting data.skip_bad_imgs; did you mean data.skip_bad_images?'"""
    prefix = f"{where}." if where else ""
    close = difflib.get_close_matches(str(key), known, n=1, cutoff=0.6)
    if close:
        return f"unknown setting {prefix}{key}; did you mean {prefix}{close[0]}?"
    return f"unknown setting {prefix}{key} (known here: {', '.join(known)})"
