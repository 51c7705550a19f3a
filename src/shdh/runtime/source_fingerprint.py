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

Tokenizing and parsing the eighty-odd modules a fit runs costs most of a second, in every stage
process that fits, scores or indexes: so each module's digest and import names are kept in the
per-user cache too (shdh.runtime.user_cache: ~/.cache/shdh/fingerprints, or
$SHDH_CACHE_DIR/fingerprints; SHDH_FINGERPRINT_CACHE=0 turns it off), keyed by the SHA-256 of
the module's name and source text, so an edited module is analysed afresh. Which of the imported
names are shdh modules is decided from the files present at each call, not cached.
"""

from __future__ import annotations

import ast
import hashlib
import io
import json
import tokenize
from collections.abc import Iterable
from functools import cache
from pathlib import Path

from shdh.runtime.atomic import atomic_write_text
from shdh.runtime.json_files import read_json_object
from shdh.runtime.user_cache import cache_dir

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
    times (resume check, checkpoint, record)."""
    digest, imported = _cached_analysis(module, path, source)
    found: set[str] = set()
    for base, names in imported:
        if not names:  # import base
            found.add(base)
        for name in names:  # from base import name: a submodule, or a name base defines
            found.add(f"{base}.{name}" if _source(f"{base}.{name}") is not None else base)
    return digest, frozenset(m for m in found if _in_package(m) and _source(m) is not None)


def _cached_analysis(module: str, path: Path, source: str) -> tuple[str, list[tuple[str, list]]]:
    """(digest, imports) of a module from the per-user cache, or analysed and stored there
    where the entry is missing or damaged; a cache that cannot be used costs only time."""
    folder = cache_dir("fingerprints", "SHDH_FINGERPRINT_CACHE")
    key = hashlib.sha256(f"{module}\0{path.name}\0{source}".encode()).hexdigest()
    entry = folder / f"{key}.json" if folder is not None else None
    if entry is not None:
        try:
            stored = read_json_object(entry, "a fingerprint entry")
            digest, imported = stored["digest"], [(b, list(n)) for b, n in stored["imports"]]
            if _is_digest(digest) and all(isinstance(b, str) for b, _ in imported):
                return digest, imported
        except (ValueError, KeyError, TypeError):
            pass  # absent or damaged: analysed again, and replaced
    digest, imported = _digest(source), _import_names(module, path, source)
    if entry is not None:
        try:
            atomic_write_text(entry, json.dumps({"digest": digest, "imports": imported}))
        except OSError:
            pass  # an unwritable cache: said by the codes cache in the same folder, not here
    return digest, imported


def _is_digest(value: object) -> bool:
    return isinstance(value, str) and len(value) == 16 and set(value) <= set("0123456789abcdef")


def _import_names(module: str, path: Path, source: str) -> list[tuple[str, list[str]]]:
    """What a module imports, at any depth of its code (a function-level import is code the
    module runs too), as (module, []) for `import module` and (base, [names]) for
    `from base import names`, relative bases made absolute; sorted, so an entry reads the same
    whoever wrote it."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[tuple[str, tuple[str, ...]]] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update((alias.name, ()) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module, node.level, package)
            found.add((base, tuple(alias.name for alias in node.names)))
    return [(base, list(names)) for base, names in sorted(found)]


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
