"""The package as docs/architecture.md draws it: its map names every module of src/shdh and no
module that is gone, with the rule of each folder as tests/unit/test_layers.py holds it; the
package's top holds few modules; and what the components import is there.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import re

from tests.conftest import REPO
from tests.unit.test_layers import ALLOWED

PACKAGE = REPO / "src" / "shdh"
MAX_TOP_MODULES = 8
MAP_ROW = re.compile(
    r"^\| (`(?P<folder>\w+)/`|\(top\)) \|[^|]*\| (?P<modules>[^|]*) \| (?P<rule>[^|]*) \|$"
)


def map_rows(text: str) -> dict[str, tuple[set[str], str]]:
    """{folder (or "" for the package's top): (its modules, its may-import cell)} from the table
    under "## The map"."""
    section = text.split("## The map", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        found = MAP_ROW.match(line.strip())
        if found:
            modules = {m.strip() for m in found["modules"].split(",") if m.strip()}
            rows[found["folder"] or ""] = (modules, found["rule"].strip())
    return rows


def package_modules() -> dict[str, set[str]]:
    """{folder (or "" for the top): its modules, packages' bodies left out}."""
    found: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        parts = path.relative_to(PACKAGE).parts
        if path.name != "__init__.py":
            found.setdefault(parts[0] if len(parts) > 1 else "", set()).add(path.stem)
    return found


def test_the_map_names_every_module_and_no_other():
    rows = map_rows((REPO / "docs" / "architecture.md").read_text(encoding="utf-8"))
    drawn = {folder: modules for folder, (modules, _) in rows.items()}
    actual = package_modules()
    problems = [
        f"{folder or '(top)'}/: the map misses {sorted(actual.get(folder, set()) - mods)}, "
        f"names {sorted(mods - actual.get(folder, set()))} that are not there"
        for folder in sorted(set(drawn) | set(actual))
        for mods in [drawn.get(folder, set())]
        if mods != actual.get(folder, set())
    ]
    assert not problems, "docs/architecture.md's map is out of date:\n  " + "\n  ".join(problems)


def test_the_map_states_each_folders_rule():
    rows = map_rows((REPO / "docs" / "architecture.md").read_text(encoding="utf-8"))
    wrong = {
        folder: rule
        for folder, (_, rule) in rows.items()
        if folder and rule != (", ".join(sorted(ALLOWED[folder])) if ALLOWED[folder] else "nothing")
    }
    assert not wrong, f"map rows whose rule is not tests/unit/test_layers.py's: {wrong}"


def test_the_map_is_read_from_its_table():
    """A row the parser cannot read would pass the map test by being left out."""
    rows = map_rows(
        "## The map\n| `core/` | x | a, b | runtime |\n| (top) | y | cli | z |\n## Next\n"
    )
    assert rows == {"core": ({"a", "b"}, "runtime"), "": ({"cli"}, "z")}


def test_few_modules_at_the_top():
    """The package's top holds the front doors that are one module and the package body; every
    other module sits in the folder of its layer."""
    top = package_modules()[""]
    assert len(top) + 1 <= MAX_TOP_MODULES, f"src/shdh holds {sorted(top)} and __init__.py"


def component_imports() -> list[tuple[str, str, str]]:
    """(component file, module, name) of every `from MODULE import NAME` in components/."""
    found = []
    for path in sorted((REPO / "components").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("shdh"):
                found += [(path.name, node.module, alias.name) for alias in node.names]
    return found


def test_what_compiled_components_import_is_there():
    """The components' code is compiled into the pipeline's YAML as it is written and runs in
    the image: each name it imports must resolve in this package."""
    missing = [
        f"{file}: from {module} import {name}"
        for file, module, name in component_imports()
        if not hasattr(importlib.import_module(module), name)
        and importlib.util.find_spec(f"{module}.{name}") is None  # a name, or a submodule
    ]
    assert len(component_imports()) > 20
    assert not missing, "component imports that no longer resolve:\n  " + "\n  ".join(missing)
