"""The layers of docs/architecture.md, checked on the source: each folder of src/shdh imports only
the folders its rule names (which point down: the rule itself has no cycle), nothing imports in a
circle, and the core needs only torch, numpy and numba. The graph is read with `ast`
(tests/import_graph.py), so lazy imports inside functions, imports under `if TYPE_CHECKING:` and
string-spelled dynamic imports count too.
"""

from __future__ import annotations

import ast
import re

import pytest

from tests import import_graph

# A unit of the layout: a folder of src/shdh, a module at its top (the front doors and the package
# body), or components/ and pipelines/. Each may import itself and the units listed, nothing else.
RUNTIME = {"runtime"}
CORE = RUNTIME | {"ranking", "core"}
NETWORKS = CORE | {"nets", "training"}
METHODS = NETWORKS | {"hashers"}
LIBRARY = METHODS | {"data", "features", "plan", "tracking", "reporting", "steps", "settings"}
ALLOWED: dict[str, set[str]] = {
    "shdh": set(),  # the package body: its version alone
    "runtime": set(),
    "ranking": RUNTIME,
    "core": RUNTIME | {"ranking"},
    "nets": CORE,
    "training": CORE | {"nets"},
    "hashers": NETWORKS,
    "data": CORE,
    "features": CORE,
    "plan": METHODS,
    "tracking": METHODS | {"data", "plan"},
    "reporting": METHODS | {"tracking"},
    # the codes in a vector database (Milvus): written by the index step, read by the service
    "vectordb": CORE,
    "steps": METHODS | {"data", "features", "plan", "tracking", "reporting", "vectordb"},
    "settings": METHODS | {"data"},
    # the front doors
    "serving": METHODS | {"data", "tracking", "vectordb"},
    "kubeflow": LIBRARY,
    "bundle": LIBRARY,
    "trainjob": LIBRARY | {"kubeflow"},
    "commands": LIBRARY | {"bundle", "kubeflow", "serving", "pipelines", "kfp", "vectordb"},
    "kfp": set(),  # the package of the DAG and components: where the cluster's manifests are
    "cli": {"shdh", "commands"},
    "components": {
        "shdh",
        "runtime",  # the CPU pin, the first statement of every component
        "kubeflow",
        "trainjob",
        "data",
        "reporting",
        "serving",
        "steps",
        "tracking",
        "vectordb",
    },
    "pipelines": LIBRARY | {"kubeflow", "components"},
}
# The units whose code is the method itself: a bare GPU machine trains with them alone.
CORE_UNITS = METHODS | {"shdh"}
CORE_THIRD_PARTY = frozenset({"torch", "numpy", "numba"})
# The shallow baselines fit with scipy's exact solvers (KSH's generalised eigenproblem, COSDISH's
# positive-definite solve, LFH's expit): replacing them would change their results. They import
# scipy inside their fit only, so the core imports, and the deep methods train, without it
# (tests/commands/test_bundle.py blocks scipy).
LAZY_EXTRAS = {
    "scipy": frozenset({"shdh.hashers.ksh", "shdh.hashers.cosdish", "shdh.hashers.lfh"}),
    "tqdm": frozenset({"shdh.runtime.progress"}),  # bars when installed, none without it
    # the torchvision backbones, their weights names and the augmented views; the CNN-F without
    "torchvision": frozenset({"shdh.nets.backbones", "shdh.nets.pretrained", "shdh.nets.views"}),
}


def unit_of(module: str) -> str:
    """shdh.core.similarity -> core; shdh.cli -> cli; shdh -> shdh; shdh.kfp -> kfp; the mapped
    folders by their own names: shdh.kfp.components.train -> components, shdh.kfp.pipelines.local
    -> pipelines."""
    parts = module.split(".")
    if parts[:2] == ["shdh", "kfp"] and len(parts) > 2:
        return parts[2]
    return parts[1] if parts[0] == "shdh" and len(parts) > 1 else parts[0]


@pytest.fixture(scope="module")
def imports() -> import_graph.Imports:
    return import_graph.scan()


def where(imports: import_graph.Imports, module: str, line: int) -> str:
    path = imports.files[module]
    shown = path.relative_to(import_graph.REPO) if path.is_relative_to(import_graph.REPO) else path
    return f"{shown}:{line}"


def test_every_unit_has_a_rule(imports):
    units = {unit_of(module) for module in imports.files}
    assert units == set(ALLOWED), (
        f"units without a rule: {sorted(units - set(ALLOWED))}; "
        f"rules of no unit: {sorted(set(ALLOWED) - units)}"
    )


def test_the_rules_point_down():
    """Read as a graph, the rules have no cycle: there is an order of the units in which each
    imports only units before it."""
    graph = {unit: {target: 1 for target in targets} for unit, targets in ALLOWED.items()}
    assert import_graph.cycles(graph) == []


def test_each_unit_imports_only_what_its_rule_allows(imports):
    outside = []
    for module, targets in sorted(imports.edges.items()):
        source = unit_of(module)
        for target, line in sorted(targets.items()):
            unit = unit_of(target)
            if unit != source and unit not in ALLOWED[source]:
                outside.append(
                    f"{module} ({source}) -> {target} ({unit})  [{where(imports, module, line)}]"
                )
    assert not outside, "imports a folder's rule does not allow:\n  " + "\n  ".join(outside)


FOLDER_RULE = re.compile(r"^May import: (.+?)\.$", re.MULTILINE | re.DOTALL)


def test_each_folder_says_what_it_holds_and_may_import(imports):
    """Every folder's __init__.py opens with a docstring whose line `May import: ...` names what
    its rule names (or `nothing of shdh`), so a reader finds the rule where the code is."""
    wrong = []
    for module, path in sorted(imports.files.items()):
        if not module.startswith("shdh.") or path.name != "__init__.py" or module.count(".") != 1:
            continue
        doc = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))) or ""
        found = FOLDER_RULE.search(doc)
        said = " ".join(found.group(1).split()) if found else None
        allowed = sorted(ALLOWED[unit_of(module)])
        expected = ", ".join(allowed) if allowed else "nothing of shdh"
        if said != expected:
            wrong.append(f"{path.relative_to(import_graph.REPO)}: says {said!r}, rule {expected!r}")
    assert not wrong, "folder docstrings that misstate their rule:\n  " + "\n  ".join(wrong)


def test_no_import_cycle(imports):
    found = import_graph.cycles(imports.edges)
    described = [
        f"{len(members)} modules: {' -> '.join(import_graph.cycle_path(imports.edges, members))}"
        f"\n    all of them: {', '.join(members)}"
        for members in found
    ]
    assert not found, "import cycles:\n  " + "\n  ".join(described)


def test_the_core_needs_only_torch_numpy_and_numba(imports):
    extra = [
        f"{module} imports {name}  [{where(imports, module, line)}]"
        for module, names in sorted(imports.external.items())
        if unit_of(module) in CORE_UNITS
        for name, line in sorted(names.items())
        if name not in CORE_THIRD_PARTY
        and not import_graph.is_stdlib(name)
        and module not in LAZY_EXTRAS.get(name, ())
    ]
    assert not extra, (
        "core modules import packages beyond torch, numpy, numba and the standard library:\n  "
        + "\n  ".join(extra)
    )


def write_package(root, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_graph_sees_every_kind_of_import(tmp_path):
    write_package(
        tmp_path / "src",
        {
            "toy/__init__.py": "",
            "toy/core.py": "from typing import TYPE_CHECKING\n"
            "if TYPE_CHECKING:\n    from toy.plan import Plan\n",
            "toy/plan.py": "import yaml\n\ndef load():\n    from . import core\n",
            "toy/cli.py": "import importlib\n\ndef main(step):\n"
            "    return importlib.import_module(f'toy.commands.{step}')\n",
            "toy/commands/__init__.py": "from .. import plan as _plan\n",
            "toy/commands/run.py": "from toy.plan import load\nHASHERS = {'a': 'toy.core:A'}\n",
            "toy/commands/info.py": "SERVER = 'localhost:port'\n",
        },
    )
    packages = (("src/toy", "toy"),)
    found = import_graph.scan(tmp_path, packages)
    assert {module: set(targets) for module, targets in found.edges.items()} == {
        "toy": set(),
        "toy.core": {"toy.plan"},  # under TYPE_CHECKING
        "toy.plan": {"toy.core"},  # inside a function, relative
        "toy.cli": {"toy.commands.info", "toy.commands.run"},  # f-string prefix
        "toy.commands": {"toy.plan"},  # `from .. import plan`: the submodule
        "toy.commands.run": {"toy.plan", "toy.core"},  # a name of toy.plan; "module:Class"
        "toy.commands.info": set(),
    }
    assert found.external["toy.plan"] == {"yaml": 1}
    assert found.external["toy.commands.info"] == {}  # a "host:port" string is no import
    assert import_graph.cycles(found.edges) == [["toy.core", "toy.plan"]]
    assert import_graph.closure(found.edges, "toy.commands.info") == {
        "toy.commands.info",
        "toy.commands",  # the package above runs first, and what it imports
        "toy.plan",
        "toy.core",
        "toy",
    }
    assert (
        import_graph.module_file("toy.commands", tmp_path, packages)
        == (tmp_path / "src/toy/commands/__init__.py").resolve()
    )


def private_uses(imports: import_graph.Imports, module: str) -> list[str]:
    """Where `module` reaches another project module's private name: `from m import _x`, or
    `m._x` on a module it imported (dunder names such as __version__ are public)."""
    path = imports.files[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    own = set(imports.files)
    bound: dict[str, str] = {}  # local name -> the project module it is bound to
    found = []

    def private(name: str) -> bool:
        return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))

    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in own:
            for alias in node.names:
                target = f"{node.module}.{alias.name}"
                if target in own:
                    bound[alias.asname or alias.name] = target
                elif private(alias.name) and node.module != module:
                    found.append(
                        f"{where(imports, module, node.lineno)}: {node.module}.{alias.name}"
                    )
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in own and alias.asname:
                    bound[alias.asname] = alias.name
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in bound
            and bound[node.value.id] != module
            and private(node.attr)
        ):
            found.append(
                f"{where(imports, module, node.lineno)}: {bound[node.value.id]}.{node.attr}"
            )
    return found


def test_no_module_uses_another_modules_private_names(imports):
    found = [use for module in sorted(imports.files) for use in private_uses(imports, module)]
    assert not found, "private names used across modules:\n  " + "\n  ".join(found)


def test_private_uses_are_seen(tmp_path):
    write_package(
        tmp_path / "src",
        {
            "toy/__init__.py": "",
            "toy/a.py": "_X = 1\n__version__ = '1'\n",
            "toy/b.py": "from toy.a import _X, __version__\nfrom toy import a\nY = a._X\n",
        },
    )
    found = import_graph.scan(tmp_path, (("src/toy", "toy"),))
    uses = private_uses(found, "toy.b")
    assert [use.split(": ")[1] for use in uses] == ["toy.a._X", "toy.a._X"]
