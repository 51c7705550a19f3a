"""No function or class in the package, the components or the pipeline is over MAX_CODE_LINES
lines of code.

Why a limit: a unit that fits on a screen can be read whole, named by the one thing it does and
tested on its own. Long units are where responsibilities pile up unnoticed (a training loop that
also checkpoints, validates and logs; a class that also holds data tables), and where a change
to one of them has to be made in the middle of the others. Sixty lines of code is about one
screen of this project's style; a class counts whole, its methods included, so a class over it
has more than one job to give away.

Lines are counted from the source with `ast`: the unit's lines from its `def` or `class` to its
end, less blank lines, comment lines and the docstrings of the unit and of what it nests.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import REPO

MAX_CODE_LINES = 60
ROOTS = ("src/shdh", "components", "pipelines")
UNITS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def docstring_lines(tree: ast.Module) -> set[int]:
    """The line numbers of every docstring in a module: the module's, each class's and each
    function's."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if not isinstance(node, (ast.Module, *UNITS)) or not node.body:
            continue
        first = node.body[0]
        if (
            isinstance(first, ast.Expr)
            and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)
        ):
            lines.update(range(first.lineno, first.end_lineno + 1))
    return lines


def code_lines(unit: ast.AST, source_lines: list[str], docstrings: set[int]) -> int:
    """How many of the unit's lines hold code: not blank, not a comment, not a docstring."""
    count = 0
    for number in range(unit.lineno, unit.end_lineno + 1):
        text = source_lines[number - 1].strip()
        if text and not text.startswith("#") and number not in docstrings:
            count += 1
    return count


def oversized_units(path: Path) -> list[str]:
    """'path:line kind name: N code lines' for each unit of the module over the limit."""
    source = path.read_text(encoding="utf-8")
    tree = ast.parse(source, filename=str(path))
    source_lines = source.splitlines()
    docstrings = docstring_lines(tree)
    found = []
    for node in ast.walk(tree):
        if isinstance(node, UNITS):
            size = code_lines(node, source_lines, docstrings)
            if size > MAX_CODE_LINES:
                kind = "class" if isinstance(node, ast.ClassDef) else "function"
                where = path.relative_to(REPO)
                found.append(f"{where}:{node.lineno} {kind} {node.name}: {size} code lines")
    return found


def modules() -> list[Path]:
    return sorted(path for root in ROOTS for path in (REPO / root).rglob("*.py"))


def test_the_modules_are_found():
    """The scan covers the package, the components and the pipeline (a moved root would
    otherwise make the size test pass on nothing)."""
    found = {path.relative_to(REPO).parts[0] for path in modules()}
    assert found == {"src", "components", "pipelines"}
    assert REPO / "src" / "shdh" / "training" / "loop.py" in modules()


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ('def f():\n    """Doc\n    string."""\n    # a comment\n\n    return 1\n', 2),
        ("class C:\n    def m(self):\n        '''Doc.'''\n        x = '''not\n a doc'''\n", 4),
    ],
    ids=["function", "class"],
)
def test_code_lines_leave_out_blank_lines_comments_and_docstrings(source, expected):
    """A docstring, nested or not, and comment and blank lines do not count; a multi-line string
    that is no docstring does."""
    tree = ast.parse(source)
    unit = tree.body[0]
    assert code_lines(unit, source.splitlines(), docstring_lines(tree)) == expected


def test_no_unit_is_over_the_limit():
    oversized = [unit for path in modules() for unit in oversized_units(path)]
    assert not oversized, (
        f"units over {MAX_CODE_LINES} code lines; split each by responsibility into smaller "
        "functions or classes:\n" + "\n".join(oversized)
    )
