"""Every DVC stage depends on exactly the code its command runs, so `dvc repro` never serves a
result that older code made: stage-code.json, whose files the inputs stage hashes into the record
each stage depends on, is generated from the import graph and the method catalogue
(tests/dvc_code_deps.py, `make dvc-deps`) and checked here against the current imports."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
import yaml

from tests import dvc_code_deps
from tests.conftest import REPO
from tests.e2e.clone import clone_repo, record_inputs, sh

CODE_LIST = REPO / "stage-code.json"


def differences(dvc_yaml, code_list, **layout) -> list[str]:
    declared = dvc_code_deps.declared_code_deps(code_list)
    computed = dvc_code_deps.stage_code_deps(dvc_yaml, **layout)
    found = []
    for stage, paths in computed.items():
        listed = declared.get(stage, [])
        missing = sorted(set(paths) - set(listed))
        extra = sorted(set(listed) - set(paths))
        if missing:
            found.append(f"stage {stage}: code it runs, not listed: {', '.join(missing)}")
        if extra:
            found.append(f"stage {stage}: listed, not generated: {', '.join(extra)}")
    return found


def test_every_stage_depends_on_the_code_it_runs():
    found = differences(REPO / "dvc.yaml", CODE_LIST)
    assert not found, (
        "stage-code.json is out of date; run `make dvc-deps` and commit it:\n  "
        + "\n  ".join(found)
    )


def test_every_stage_that_runs_code_depends_on_the_record_of_it():
    """The list is only half: each stage must depend on the record the inputs stage writes of
    its files, and the inputs stage must be the one that writes it."""
    stages = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"]
    inputs = stages["inputs"]
    assert "--code stage-code.json" in inputs["cmd"]
    written = [next(iter(out)) for out in inputs["outs"]]
    for stage in dvc_code_deps.declared_code_deps(CODE_LIST):
        record = f"artifacts/inputs/{stage}.json"
        assert record in written, f"the inputs stage does not write {record}"
        body = stages[stage].get("do", stages[stage])
        assert record in body["deps"], f"stage {stage} does not depend on {record}"
        assert not any(d.startswith("src/") for d in body["deps"]), stage


def stages_running(path: str) -> set[str]:
    """The stages whose list names `path`: those that `dvc repro` reruns when it is edited."""
    declared = dvc_code_deps.declared_code_deps(CODE_LIST)
    return {stage for stage, files in declared.items() if path in files}


# Each stage reruns for the code it executes, and only for it: the training loop's edit reruns
# the deep fits (the `train` foreach stage, one entry) and the stages that encode with the
# networks (evaluate, index), never the GIST features; a GIST edit reruns only the features
# stage by its code (the shallow fits and the evaluation read the features file, so DVC reruns
# them when the file changes, not when the code does), never a deep fit.
DEEP_STAGES = {"train", "evaluate", "index"}  # evaluate and index encode with the networks
GIST_STAGES = {"features"}


@pytest.mark.parametrize(
    ("path", "stages"),
    [
        ("src/shdh/training/loop.py", DEEP_STAGES),
        ("src/shdh/hashers/shdh.py", DEEP_STAGES),
        ("src/shdh/hashers/dpsh.py", DEEP_STAGES),
        ("src/shdh/core/batch_pairs.py", DEEP_STAGES),
        ("src/shdh/hashers/deep.py", DEEP_STAGES),
        ("src/shdh/hashers/oracle.py", DEEP_STAGES),
        ("src/shdh/tracking/encoder_model.py", {"train"}),  # only a deep fit logs an encoder
        ("src/shdh/features/gist.py", GIST_STAGES),
        # a shallow method's code: its fits, and the stages that load any model (index serves
        # whatever is registered)
        ("src/shdh/hashers/itq.py", {"baselines", "evaluate", "index"}),
    ],
)
def test_a_module_reruns_only_the_stages_that_execute_it(path, stages):
    assert (REPO / path).is_file(), path
    assert stages_running(path) == stages


def test_a_stage_depends_on_the_declared_methods_of_the_kinds_it_runs():
    """No import names a method's module (the catalogue names it, shdh.hashers loads it): the
    deep fits depend on every deep method and on no shallow one, the shallow fits the other way
    round, and the stages that load any model on all of them."""
    from shdh.hashers.method_catalogue import METHODS

    files = {m.name: f"src/{m.module.replace('.', '/')}.py" for m in METHODS}
    for name, path in files.items():
        kind = next(m.kind for m in METHODS if m.name == name)
        expected = {"evaluate", "index", "train" if kind == "deep" else "baselines"}
        assert stages_running(path) == expected, name


def test_the_stages_that_read_raw_data_depend_on_every_declared_reader():
    """A dataset's reader is loaded by its name too (shdh.steps.prepare.dataset_module): the
    stages whose code uses that step depend on each reader the dataset catalogue declares, the
    others on none."""
    from shdh.data.dataset_catalogue import DATASETS

    readers = {f"src/{e.module.replace('.', '/')}.py" for e in DATASETS.values()}
    running = {path: stages_running(path) for path in sorted(readers)}
    assert len({frozenset(stages) for stages in running.values()}) == 1, running
    assert {"prepare", "tree"} <= next(iter(running.values()))
    assert "features" not in next(iter(running.values()))


def test_only_the_deep_stages_depend_on_the_networks_and_losses():
    """(The nets package body holds only the head's choices, which the loop's torch-free settings
    offer: every stage checks them.)"""
    deep_code = ["src/shdh/core/batch_pairs.py", "src/shdh/training/objective.py"] + [
        p.relative_to(REPO).as_posix()
        for p in sorted((REPO / "src/shdh/nets").glob("*.py"))
        if p.name != "__init__.py"
    ]
    found = {path: stages_running(path) for path in deep_code}
    assert {path: stages for path, stages in found.items() if stages != DEEP_STAGES} == {}


def test_tracking_and_the_early_stages_load_no_hasher():
    """The tracking glue that every stage loads names no hasher: preparing, the label tree, the
    S-matrix and the features rerun for none of the methods' code. (The method catalogue and
    the methods' settings, which the settings check reads, and the package body that holds
    them, are declarations, not code that fits.)"""
    declarations = {"__init__.py", "method_catalogue.py", "method_settings.py"}
    hashers = [
        p.relative_to(REPO).as_posix()
        for p in sorted((REPO / "src/shdh/hashers").glob("*.py"))
        if p.name not in declarations
    ]
    early = {"prepare", "tree", "smatrix", "features"}
    assert {path: stages_running(path) & early for path in hashers} == {
        path: set() for path in hashers
    }


PARENTS = {
    "toy/__init__.py": "",
    "toy/heavy.py": "",
    "toy/light.py": "",
    "toy/methods/__init__.py": (
        "from toy.methods.cheap import CHEAP\n"
        "ALL = {**CHEAP, 'big': 'toy.heavy:Big'}\n\n"
        "def get(name):\n    import importlib\n    return importlib.import_module(name)\n"
    ),
    "toy/methods/cheap.py": "CHEAP = {'small': 'toy.light:Small'}\n",
    "toy/commands/__init__.py": "",
    "toy/commands/small.py": "from toy.methods.cheap import CHEAP\n",
    "toy/commands/every.py": "from toy.methods import get\n",
    "toy/commands/bound.py": "import toy.methods.cheap\n",
}


def test_a_parent_package_counts_for_what_its_import_runs(tmp_path):
    """Importing toy.methods.cheap runs toy/methods/__init__.py's module body, whose imports
    load toy.methods.cheap; the strings it names and its functions' imports run only for code
    that uses toy.methods itself (`from toy.methods import get`, or `import toy.methods.cheap`,
    which binds toy and so toy.methods)."""
    for name, text in PARENTS.items():
        path = tmp_path / "src" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    imports = dvc_code_deps.import_graph.scan(tmp_path, (("src/toy", "toy"),))
    assert imports.eager["toy.methods"] == {"toy.methods.cheap": 1}

    def loads(module):
        return dvc_code_deps.import_graph.closure(imports.edges, module, imports.eager)

    parents = {"toy", "toy.commands", "toy.methods"}
    assert loads("toy.commands.small") == {
        "toy.commands.small",
        "toy.methods.cheap",
        "toy.light",
        *parents,
    }
    assert "toy.heavy" in loads("toy.commands.every")
    assert "toy.heavy" in loads("toy.commands.bound")
    # without `eager`, a parent package counts whole
    assert "toy.heavy" in dvc_code_deps.import_graph.closure(imports.edges, "toy.commands.small")


TOY = {
    "toy/__init__.py": "",
    "toy/core.py": "def fit():\n    return 1\n",
    "toy/extra.py": "",
    "toy/io/__init__.py": "",
    "toy/io/read.py": "",
    "toy/commands/__init__.py": "",
    "toy/commands/prepare.py": "import toy.io.read\n",
    "toy/commands/train.py": "def run():\n    from toy import core\n",
}
TOY_DVC_YAML = """\
stages:
  # the stage that reads the raw files
  prepare:
    cmd: toy prepare --out data/prepared
    deps:
      - data/raw   # the raw files
      - src/toy/old.py
    outs:
      - data/prepared
  train:
    foreach: ${methods}
    do:
      cmd: toy train --method ${item} && echo --method toy
      deps:
        - data/prepared
        - src/toy/core.py
        # one folder per method
      outs:
        - models/${item}
  check:
    cmd: toy prepare --check
    always_changed: true
  summary:
    cmd: toy train --summary
    outs:
      - summary.md
"""
TOY_LAYOUT = {"packages": (("src/toy", "toy"),), "commands": {"toy": ("toy.commands.{}",)}}


@pytest.fixture
def toy(tmp_path):
    for name, text in TOY.items():
        path = tmp_path / "src" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (tmp_path / "dvc.yaml").write_text(TOY_DVC_YAML)
    return tmp_path


def test_a_new_import_fails_the_check_until_the_list_is_regenerated(toy):
    dvc_yaml, code_list = toy / "dvc.yaml", toy / "stage-code.json"
    code_list.write_text('{"stages": {"prepare": ["src/toy/old.py"]}}')  # a stale list
    assert differences(dvc_yaml, code_list, **TOY_LAYOUT)
    before = dvc_yaml.read_text()
    dvc_code_deps.write_code_deps(dvc_yaml, code_list, **TOY_LAYOUT)
    assert differences(dvc_yaml, code_list, **TOY_LAYOUT) == []
    assert dvc_yaml.read_text() == before  # dvc.yaml names records, never the code itself
    common = ["src/toy/__init__.py", "src/toy/commands/__init__.py"]
    assert dvc_code_deps.declared_code_deps(code_list) == {
        "prepare": [
            *common,
            "src/toy/commands/prepare.py",
            "src/toy/io/__init__.py",
            "src/toy/io/read.py",
        ],
        "train": [*common, "src/toy/commands/train.py", "src/toy/core.py"],
        "summary": [*common, "src/toy/commands/train.py", "src/toy/core.py"],
    }  # not `check`: it runs on every repro anyway
    written = code_list.read_text()
    dvc_code_deps.write_code_deps(dvc_yaml, code_list, **TOY_LAYOUT)
    assert code_list.read_text() == written  # regenerating changes nothing

    core = toy / "src/toy/core.py"
    core.write_text(core.read_text() + "\n\ndef more():\n    import toy.extra\n")
    assert differences(dvc_yaml, code_list, **TOY_LAYOUT) == [
        f"stage {stage}: code it runs, not listed: src/toy/extra.py"
        for stage in ("train", "summary")
    ]
    dvc_code_deps.write_code_deps(dvc_yaml, code_list, **TOY_LAYOUT)
    assert differences(dvc_yaml, code_list, **TOY_LAYOUT) == []


def test_a_command_with_no_module_is_named(toy):
    dvc_yaml = toy / "dvc.yaml"
    dvc_yaml.write_text("stages:\n  fit:\n    cmd: toy fti --fast\n")
    with pytest.raises(ValueError, match=r"stages\.fit\.cmd: `toy fti` names no command module"):
        dvc_code_deps.stage_code_deps(dvc_yaml, **TOY_LAYOUT)


# What DVC itself says. In a copy of the checkout whose every stage is committed as up to date
# (the inputs stage's records as it writes them; placeholder files stand in for the data and the
# other outputs: only the code's hashes matter), an edit of a reporting module changes the record
# of evaluate alone once the inputs stage has run, as `dvc repro` runs it first; the stages after
# evaluate (register, index) depend on its outputs, so DVC reruns them only when those change.
# `inputs` is always changed by design.
ALWAYS_CHANGED = {"inputs"}

PLACEHOLDERS = """
from pathlib import Path
from dvc.repo import Repo

for stage in Repo(".").index.stages:
    for item in [*stage.outs, *stage.deps]:
        path = Path(item.fs_path)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            if path.suffix:
                path.write_text("placeholder\\n")
            else:
                path.mkdir()
                (path / "placeholder").write_text("placeholder\\n")
"""


@pytest.fixture(scope="module")
def committed_copy(tmp_path_factory) -> tuple[Path, dict[str, str]]:
    """A copy of the checkout as git would clone it, every DVC stage committed as up to date;
    with the environment to run dvc there."""
    copy = tmp_path_factory.mktemp("checkout") / "shdh"
    env = clone_repo(copy)
    record_inputs(copy)
    sh([sys.executable, "-c", PLACEHOLDERS], copy, env)
    sh(["dvc", "commit", "--force", "--quiet"], copy, env)
    assert set(json.loads(sh(["dvc", "status", "--json"], copy, env))) == ALWAYS_CHANGED
    return copy, env


@pytest.mark.slow
@pytest.mark.parametrize(
    "module", ["src/shdh/reporting/figures.py", "src/shdh/reporting/report.py"]
)
def test_dvc_reruns_nothing_before_evaluate_for_a_reporting_edit(committed_copy, module):
    copy, env = committed_copy
    path = copy / module
    text = path.read_text()
    edited = text + "\n# an edit of the figures' or the report's code\n"
    path.write_text(edited)
    try:
        record_inputs(copy)
        status = json.loads(sh(["dvc", "status", "--json"], copy, env))
        record = json.loads((copy / "artifacts" / "inputs" / "evaluate.json").read_text())
    finally:
        path.write_text(text)
        record_inputs(copy)
    assert set(status) - ALWAYS_CHANGED == {"evaluate"}
    [changed] = [entry["changed deps"] for entry in status["evaluate"]]
    assert changed == {"artifacts/inputs/evaluate.json": "modified"}
    assert record["code"][module] == hashlib.md5(edited.encode()).hexdigest()
