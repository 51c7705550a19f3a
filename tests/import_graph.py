"""The import graph of the project's own modules, read from the source with `ast` (nothing is
imported, so a module with a broken or heavy import is still seen, and reading is fast).

An edge a -> b means that running module a can import module b: an `import` or `from ... import`
anywhere in a (module level, inside a function, under `if TYPE_CHECKING:`), or a dynamic import
that the code spells as a string literal. The edges a module makes while it is imported (its
module-level imports, not those inside its functions nor its registry strings) are also kept
apart, as `eager`: a package that Python runs only because a module under it is imported runs
those alone (closure). The tests of the layers and the generated DVC code dependencies both read
it; the only layout they know is PACKAGES.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# (a package's folder relative to the repository, its dotted name): the package, and the two
# top-level folders that pyproject.toml's package-dir installs under its name.
PACKAGES: tuple[tuple[str, str], ...] = (
    ("src/shdh", "shdh"),
    ("components", "shdh.kfp.components"),
    ("pipelines", "shdh.kfp.pipelines"),
)

# A string that names a module attribute the way entry points do ("pkg.module:Class"): a
# registry of such strings is a lazy import the code performs later.
_ATTRIBUTE_REF = re.compile(r"([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):[A-Za-z_]\w*")
_IMPORT_FUNCTIONS = {"import_module", "__import__"}

Graph = Mapping[str, Mapping[str, int]]  # module -> {imported module: first line that imports it}


@dataclass
class Imports:
    """What every module imports: `edges` among the project's own modules, `eager` the part of
    them that importing the module runs, `external` by the top-level name of any other import
    (a third-party package or the standard library)."""

    files: dict[str, Path]
    edges: dict[str, dict[str, int]] = field(default_factory=dict)
    eager: dict[str, dict[str, int]] = field(default_factory=dict)
    external: dict[str, dict[str, int]] = field(default_factory=dict)

    def __repr__(self) -> str:  # a failing test prints its fixtures: keep that to one line
        return f"Imports({len(self.files)} modules)"


def module_files(root: Path = REPO, packages=PACKAGES) -> dict[str, Path]:
    """Every Python module of the packages, by dotted name (a package by its __init__.py)."""
    files = {}
    for folder, package in packages:
        base = (root / folder).resolve()
        for path in sorted(base.rglob("*.py")):
            parts = path.relative_to(base).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            files[".".join([package, *parts])] = path
    return files


def module_file(module: str, root: Path = REPO, packages=PACKAGES) -> Path:
    """The source file of a module, or KeyError naming it."""
    for folder, package in packages:
        if module == package or module.startswith(package + "."):
            inner = module.removeprefix(package).lstrip(".").split(".")
            path = (root / folder).resolve().joinpath(*[p for p in inner if p])
            for candidate in (path / "__init__.py", path.with_suffix(".py")):
                if candidate.is_file():
                    return candidate
    raise KeyError(f"no source file for module {module!r} under {root}")


def scan(root: Path = REPO, packages=PACKAGES) -> Imports:
    """Parse every module once and resolve what it imports."""
    imports = Imports(module_files(root, packages))
    tops = {package.split(".")[0] for _, package in packages}
    for module, path in imports.files.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        edges = imports.edges.setdefault(module, {})
        eager = imports.eager.setdefault(module, {})
        external = imports.external.setdefault(module, {})
        is_package = path.name == "__init__.py"
        for name, line, literal, at_import in _imported_names(tree, module, is_package):
            top = name.split(".")[0]
            if top not in tops:
                if not literal:  # "host:port" and the like are no import
                    external.setdefault(top, line)
                continue
            if name.endswith("."):  # an f-string prefix: every module under it
                targets = [target for target in imports.files if target.startswith(name)]
            elif not literal or name in imports.files:
                targets = [_nearest_module(name, imports.files)]
            else:
                targets = []
            for target in targets:
                if target != module:  # `from . import name` in a package names itself
                    edges.setdefault(target, line)
                    if at_import:
                        eager.setdefault(target, line)
    return imports


def cycles(graph: Graph) -> list[list[str]]:
    """The strongly connected components of more than one module (or a module that imports
    itself), each sorted; Tarjan's algorithm."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in graph.get(node, ()):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1 or node in graph.get(node, ()):
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(found)


def cycle_path(graph: Graph, component: Iterable[str]) -> list[str]:
    """One shortest loop through the first module of a cycle, so that a failure shows a chain
    of imports that someone can follow and cut, not only a set of modules."""
    members = sorted(component)
    start, inside = members[0], set(members)
    paths = {start: [start]}
    frontier = [start]
    while frontier:
        successors = []
        for node in frontier:
            for target in sorted(graph.get(node, ())):
                if target == start:
                    return [*paths[node], start]
                if target in inside and target not in paths:
                    paths[target] = [*paths[node], target]
                    successors.append(target)
        frontier = successors
    raise ValueError(f"{members} is not a cycle of the graph")


def closure(graph: Graph, module: str, eager: Graph | None = None) -> set[str]:
    """Every module that running `module` can load: what it imports, transitively, and the
    packages above each of them, whose __init__.py Python runs first.

    With `eager` (Imports.eager), a package that is loaded only as the parent of another module
    counts for what its import runs: its module-level imports, not the imports inside its
    functions nor the "module:Class" strings they resolve, which run only for code that uses
    the package itself, and that code imports it by name (an edge of its own). A registry in a
    package's __init__.py is thus loaded by its users, not by every module under it. Without
    `eager`, a parent counts whole."""
    whole, body = reach(graph, module, eager)
    return whole | body


def reach(graph: Graph, module: str, eager: Graph | None = None) -> tuple[set[str], set[str]]:
    """closure's two parts: the modules imported by name (any of their functions may run) and
    those loaded only as the parent of another (their module body ran)."""
    whole: set[str] = set()  # imported by name: any of its functions may run
    body: set[str] = set()  # loaded only as a parent: its module body ran
    todo = [(module, True)]
    while todo:
        node, used = todo.pop()
        if node in whole or (node in body and not used) or node not in graph:
            continue  # a folder without __init__.py runs no code
        (whole if used else body).add(node)
        targets = graph[node] if used or eager is None else eager.get(node, {})
        todo.extend((target, True) for target in targets)
        parts = node.split(".")
        todo.extend((".".join(parts[:i]), eager is None) for i in range(1, len(parts)))
    return whole, body


def is_stdlib(name: str) -> bool:
    return name in sys.stdlib_module_names


def _nearest_module(name: str, files: Mapping[str, Path]) -> str:
    """The module itself, else the closest package above it: `from pkg.mod import name` names
    an attribute of pkg.mod, and a module that does not exist fails in its own tests."""
    parts = name.split(".")
    while len(parts) > 1 and ".".join(parts) not in files:
        parts.pop()
    return ".".join(parts)


def _imported_names(
    tree: ast.AST, module: str, is_package: bool
) -> Iterable[tuple[str, int, bool, bool]]:
    """(dotted name, line, whether it is a "module:attribute" string, whether importing the
    module runs it) for everything the module imports. A name may be a module or an attribute
    of one, resolved by _nearest_module; a name ending in "." stands for every module under it.
    What a function body holds runs only when the function is called; a registry string only
    when some function resolves it."""
    for node, at_import in _nodes(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, node.lineno, False, at_import
                if alias.asname is None:  # `import a.b` binds `a`: a and a.b are used too
                    parts = alias.name.split(".")
                    for i in range(1, len(parts)):
                        yield ".".join(parts[:i]), node.lineno, False, at_import
        elif isinstance(node, ast.ImportFrom):
            # `from pkg import x`: the submodule pkg.x when there is one, else pkg itself
            base = _absolute(node.module, node.level, module, is_package)
            for alias in node.names:
                name = base if alias.name == "*" else f"{base}.{alias.name}"
                yield name, node.lineno, False, at_import
        elif isinstance(node, ast.Call) and _call_name(node) in _IMPORT_FUNCTIONS and node.args:
            name = _literal_prefix(node.args[0])
            if name:
                yield name, node.lineno, False, at_import
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            match = _ATTRIBUTE_REF.fullmatch(node.value)
            if match:
                yield match.group(1), node.lineno, True, False


def _nodes(tree: ast.AST) -> Iterable[tuple[ast.AST, bool]]:
    """Every node, and whether it runs when the module is imported: all but the bodies of
    functions and lambdas (their decorators and defaults run; a class body runs)."""
    todo: list[tuple[ast.AST, bool]] = [(tree, True)]
    while todo:
        node, at_import = todo.pop()
        yield node, at_import
        function = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda))
        for name, value in ast.iter_fields(node):
            runs = at_import and not (function and name == "body")
            children = value if isinstance(value, list) else [value]
            todo.extend((child, runs) for child in children if isinstance(child, ast.AST))


def _absolute(name: str | None, level: int, module: str, is_package: bool) -> str:
    if level == 0:
        return name or ""
    parts = module.split(".")
    if not is_package:
        parts = parts[:-1]
    parts = parts[: len(parts) - (level - 1)]
    return ".".join([*parts, name] if name else parts)


def _call_name(call: ast.Call) -> str | None:
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    if isinstance(call.func, ast.Name):
        return call.func.id
    return None


def _literal_prefix(arg: ast.expr) -> str | None:
    """ "a.b" for a constant; "a.b." for f"a.b.{x}" (any module under a.b); None otherwise."""
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr) and arg.values:
        first = arg.values[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str) and "." in first.value:
            return first.value[: first.value.rindex(".") + 1]
    return None
