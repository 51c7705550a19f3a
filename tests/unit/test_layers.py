"""The layers of docs/architecture.md, checked on the source: every module has a layer, imports
point only down or sideways, nothing imports in a circle, and the core needs only torch, numpy
and numba. The graph is read with `ast` (tests/import_graph.py), so lazy imports inside
functions, imports under `if TYPE_CHECKING:` and string-spelled dynamic imports count too.
"""

from __future__ import annotations

from fnmatch import fnmatchcase

import pytest

from tests import import_graph

# Module-name pattern (fnmatch) -> layer; the most specific pattern that matches a module wins.
# A new module must be placed here on purpose: test_every_module_has_a_layer names it.
CORE, STEPS, PLAN, FRONT_DOORS = 1, 2, 3, 4
LAYERS: dict[str, int] = {
    # core maths: torch, numpy, numba and the standard library only
    "shdh": CORE,  # the package's __init__.py
    "shdh.atomic": CORE,
    "shdh.code_fingerprint": CORE,
    "shdh.cpu_pin": CORE,
    "shdh.cpu_limit": CORE,
    "shdh.errors": CORE,
    "shdh.devices": CORE,
    "shdh.hierarchy": CORE,
    "shdh.similarity": CORE,
    "shdh.losses": CORE,
    "shdh.nets*": CORE,
    "shdh.image_input": CORE,
    "shdh.training": CORE,
    "shdh.training_state": CORE,
    "shdh.training_step": CORE,
    "shdh.inference": CORE,
    "shdh.checkpoint": CORE,
    "shdh.batches": CORE,
    "shdh.loss_log": CORE,
    "shdh.probe_codes": CORE,
    "shdh.convergence": CORE,
    "shdh.checkpoint_writer": CORE,
    "shdh.cuda_graph_step": CORE,
    "shdh.loop": CORE,
    "shdh.retrieval": CORE,
    "shdh.retrieval_kernel": CORE,
    "shdh.search": CORE,
    "shdh.search_kernel": CORE,
    "shdh.search_rank": CORE,
    "shdh.metrics": CORE,
    "shdh.codes": CORE,
    "shdh.hashers*": CORE,
    "shdh.methods": CORE,
    # the library steps, and the stores and reports around them
    "shdh.data*": STEPS,
    "shdh.features*": STEPS,
    "shdh.steps*": STEPS,
    # the plan's vocabulary (a Fit, its name, its folders): below the steps that read it
    "shdh.fits": STEPS,
    "shdh.report": STEPS,
    "shdh.figures": STEPS,
    "shdh.paper_results": STEPS,
    "shdh.tracking": STEPS,
    "shdh.encoder_model": STEPS,
    "shdh.mlflow_store": STEPS,
    "shdh.parent_run": STEPS,
    "shdh.parent_summary": STEPS,
    "shdh.comparison_view": STEPS,
    "shdh.registry": STEPS,
    "shdh.checkpoint_store": STEPS,
    "shdh.inputs": STEPS,
    "shdh.progress": STEPS,
    # the run plan and the settings
    "shdh.plan": PLAN,
    "shdh.plan_shallow": PLAN,
    "shdh.settings*": PLAN,
    "shdh.config": PLAN,
    # the front doors: the CLI and its commands (which DVC runs), Kubeflow
    "shdh.cli": FRONT_DOORS,
    "shdh.commands*": FRONT_DOORS,
    "shdh.serving*": FRONT_DOORS,  # the search service: HTTP routes over shdh.search
    "shdh.kubeflow": FRONT_DOORS,
    "shdh.bundle": FRONT_DOORS,
    "components*": FRONT_DOORS,
    "pipelines*": FRONT_DOORS,
}
CORE_THIRD_PARTY = frozenset({"torch", "numpy", "numba"})
# The shallow baselines fit with scipy's exact solvers (KSH's generalised eigenproblem, COSDISH's
# positive-definite solve, LFH's expit): replacing them would change their results. They import
# scipy inside their fit only, so the core imports, and the deep methods train, without it
# (tests/commands/test_bundle.py blocks scipy).
FIT_ONLY = {"scipy": frozenset({"shdh.hashers.ksh", "shdh.hashers.cosdish", "shdh.hashers.lfh"})}


def layer_of(module: str, layers: dict[str, int] = LAYERS) -> int | None:
    """The layer of the most specific matching pattern (the most literal characters; an exact
    name beats a wildcard); None when no pattern matches or the best ones disagree."""
    matches = [pattern for pattern in layers if fnmatchcase(module, pattern)]
    if not matches:
        return None
    best = max(map(_specificity, matches))
    found = {layers[pattern] for pattern in matches if _specificity(pattern) == best}
    return found.pop() if len(found) == 1 else None


def _specificity(pattern: str) -> tuple[int, bool]:
    literal = sum(ch not in "*?[]" for ch in pattern)
    return literal, not any(ch in "*?[" for ch in pattern)


@pytest.fixture(scope="module")
def imports() -> import_graph.Imports:
    return import_graph.scan()


def where(imports: import_graph.Imports, module: str, line: int) -> str:
    return f"{imports.files[module].relative_to(import_graph.REPO)}:{line}"


def test_the_layer_table_resolves_patterns_by_specificity():
    table = {"a*": 2, "a.b*": 3, "a.b.c": 1, "x?": 1, "x*": 4}
    assert layer_of("a", table) == 2
    assert layer_of("a.z", table) == 2
    assert layer_of("a.b", table) == 3
    assert layer_of("a.b.d", table) == 3
    assert layer_of("a.b.c", table) == 1
    assert layer_of("q", table) is None
    assert layer_of("xy", {"x?": 1, "?y": 2}) is None  # a tie between layers is no answer


def test_every_module_has_a_layer(imports):
    unplaced = sorted(module for module in imports.files if layer_of(module) is None)
    assert not unplaced, (
        "modules with no layer (or patterns of equal weight that disagree); give each one a "
        "line in LAYERS of tests/unit/test_layers.py:\n  " + "\n  ".join(unplaced)
    )


def test_imports_point_down(imports):
    upward = []
    for module, targets in sorted(imports.edges.items()):
        source = layer_of(module)
        for target, line in sorted(targets.items()):
            destination = layer_of(target)
            if source is not None and destination is not None and destination > source:
                upward.append(
                    f"{module} (layer {source}) -> {target} (layer {destination})"
                    f"  [{where(imports, module, line)}]"
                )
    assert not upward, "imports from a lower layer into a higher one:\n  " + "\n  ".join(upward)


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
        if layer_of(module) == CORE
        for name, line in sorted(names.items())
        if name not in CORE_THIRD_PARTY
        and not import_graph.is_stdlib(name)
        and module not in FIT_ONLY.get(name, ())
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
    packages = (("src", "toy"),)
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
