"""The walk that applies the settings' checks (shdh.runtime.value_checks) to a section.

A check knows how to describe what it accepts, so every error reads the same way: the file, the
dotted key, what was expected and the value found, on one line. Sections are frozen dataclasses
whose fields carry their check and their meaning in the field metadata (value_checks.setting), so
one walk validates every section, nested ones included.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Mapping
from typing import Any

import yaml

from shdh.runtime.errors import ConfigError
from shdh.runtime.value_checks import (
    REQUIRED,
    Check,
    ListCheck,
    Mismatch,
    SectionCheck,
    setting,
)


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
