"""Which code made a model: a digest per module of the source that decides a fit's numbers.

A checkpoint that matches the settings and the data is not enough to resume from: after a change
to the loss, the network or the loop, a rerun would "resume" a finished checkpoint and report the
old code's model as the new one's. So a fit records, for every shdh module it
runs (the module that defines the hasher and everything of shdh it imports, transitively: the
networks, the losses, the loop, the similarity, ...), a digest of the module's code, and a
checkpoint is resumed only by the same digests (shdh.training.loop).

The digest ignores comments, docstrings and blank or trailing space, so that rewording a
docstring keeps a checkpoint, while any change to code does not. It is read from the source
with tokenize and ast alone (no import), so it is the same on every Python version that parses the
file; a process reads each module's source once per distinct text.
"""

from __future__ import annotations

import ast
import hashlib
import io
import tokenize
from collections.abc import Iterable
from functools import cache
from pathlib import Path

PACKAGE = "shdh"


def fingerprint(modules: Iterable[str]) -> dict[str, str]:
    """{module: 16-hex digest of its code} for the given shdh modules and every shdh module they
    import, transitively; sorted by name."""
    seen: dict[str, str] = {}
    todo = [m for m in modules if _in_package(m)]
    while todo:
        module = todo.pop()
        if module in seen:
            continue
        path = _source(module)
        if path is None:
            continue
        seen[module], imported = _analysed(module, path, path.read_text(encoding="utf-8"))
        todo.extend(m for m in imported if m not in seen)
    return dict(sorted(seen.items()))


def differing(saved: dict[str, str] | None, current: dict[str, str]) -> list[str]:
    """The modules whose code differs between two fingerprints (added or removed ones too);
    everything when the saved one is missing (a checkpoint from before fingerprints)."""
    if not isinstance(saved, dict):
        return sorted(current) or ["(no fingerprint)"]
    return sorted(m for m in set(saved) | set(current) if saved.get(m) != current.get(m))


def _in_package(module: str) -> bool:
    return module == PACKAGE or module.startswith(PACKAGE + ".")


@cache
def _source(module: str) -> Path | None:
    """The file of a shdh module, found beside this one: finding it by import machinery would
    import its parent packages, torch with them."""
    parts = module.split(".")[1:]
    package = Path(__file__).resolve().parents[1].joinpath(*parts)
    for path in (package / "__init__.py", package.with_suffix(".py")):
        if path.is_file():
            return path
    return None


@cache
def _analysed(module: str, path: Path, source: str) -> tuple[str, frozenset[str]]:
    """A module's digest and the shdh modules it imports. Kept per process, keyed by the source
    text itself (so an edited file is read afresh): a fit asks for the same fingerprint several
    times (resume check, checkpoint, record), and tokenizing some twenty modules costs most of a
    second each time."""
    return _digest(source), frozenset(_imports(module, path, source))


def _imports(module: str, path: Path, source: str) -> set[str]:
    """The shdh modules a module imports, at any depth of its code (a function-level import is
    code the module runs too): `from pkg import name` counts pkg.name where it is a module."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module, node.level, package)
            for alias in node.names:  # a submodule, or a name the base module defines
                sub = f"{base}.{alias.name}"
                found.add(sub if _source(sub) is not None else base)
    return {m for m in found if _in_package(m) and _source(m) is not None}


def _absolute(name: str | None, level: int, package: str) -> str:
    if level == 0:
        return name or ""
    parts = package.split(".")
    base = ".".join(parts[: len(parts) - (level - 1)])
    return f"{base}.{name}" if name else base


def _digest(source: str) -> str:
    return hashlib.sha256(code_text(source).encode()).hexdigest()[:16]


def code_text(source: str) -> str:
    """The source with comments, docstrings, blank lines and trailing spaces removed."""
    lines = source.splitlines()
    cuts = [(*tok.start, *tok.end) for tok in _tokens(source) if tok.type == tokenize.COMMENT]
    cuts += [_char_span(node, lines) for node in _docstrings(ast.parse(source))]
    for row, col, end_row, end_col in sorted(cuts, reverse=True):
        head, tail = lines[row - 1][:col], lines[end_row - 1][end_col:]
        lines[row - 1 : end_row] = [head + tail]
    return "\n".join(line.rstrip() for line in lines if line.strip())


def _tokens(source: str) -> list[tokenize.TokenInfo]:
    return list(tokenize.generate_tokens(io.StringIO(source).readline))


def _docstrings(tree: ast.AST) -> list[ast.Expr]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            first = node.body[0] if node.body else None
            if (
                isinstance(first, ast.Expr)
                and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)
            ):
                found.append(first)
    return found


def _char_span(node: ast.expr, lines: list[str]) -> tuple[int, int, int, int]:
    """ast's columns count UTF-8 bytes; the cut works on characters."""

    def chars(row: int, byte_col: int) -> int:
        return len(lines[row - 1].encode()[:byte_col].decode(errors="ignore"))

    assert node.end_lineno is not None and node.end_col_offset is not None
    return (
        node.lineno,
        chars(node.lineno, node.col_offset),
        node.end_lineno,
        chars(node.end_lineno, node.end_col_offset),
    )
