"""The code each DVC stage runs, computed from the import graph and the method catalogue, so that
`dvc repro` reruns a stage whenever any module its command can load changes, wherever modules
move.

A stage's `cmd:` runs `shdh STEP`; the CLI loads the command module of STEP, and the stage's code
is everything that module imports, transitively (tests/import_graph.py). A method's module is
loaded by its name (shdh.hashers.hasher_class), which no import spells: a stage whose code uses
the package shdh.hashers by name runs the methods the catalogue declares, those of the kinds its
params name (`train...`: the deep methods, `baselines...`: the shallow ones; neither: every
method, a stage that loads whatever model it is given), and each one's code with them. So with
the datasets' readers: a stage whose code uses shdh.steps.prepare runs any declared reader.
The lists go to stage-code.json, not into dvc.yaml: the `inputs` stage hashes each stage's files
into the record the stage depends on (shdh.steps.input_hashes), which keeps dvc.lock short.

    python -m tests.dvc_code_deps [dvc.yaml [stage-code.json]]   # rewrite it (`make dvc-deps`)
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from ruamel.yaml import YAML

from shdh.hashers import method_catalogue
from shdh.runtime.atomic import atomic_write_text
from shdh.steps.input_hashes import CODE_LIST
from tests import import_graph

# How a `cmd:` names the code it runs: entry point -> where its command module STEP lives, the
# first one that exists.
COMMANDS: dict[str, tuple[str, ...]] = {"shdh": ("shdh.commands.{}",)}
_SHELL_SEPARATORS = {"&&", "||", ";", "|"}
GENERATED_BY = "make dvc-deps (tests/dvc_code_deps.py); checked by tests/unit/test_dvc_deps.py"
Packages = Sequence[tuple[str, str]]
LOADER = "shdh.hashers"  # the package whose hasher_class and load_hasher load methods by name
DATASET_LOADER = "shdh.steps.prepare"  # whose dataset_module loads a dataset's reader by name


def stage_kinds(body: Mapping, methods=None) -> set[str]:
    """The kinds of method a stage runs, from the params it reads: a kind's settings section
    (train, baselines) or a key under it; none named: every kind."""
    named = set()
    for param in body.get("params") or []:
        key = next(iter(param)) if isinstance(param, Mapping) else str(param)
        named.add(key.split(".")[0])
    declared = method_catalogue.METHODS if methods is None else methods
    kinds = {m.kind for m in declared if m.section in named}
    return kinds or {m.kind for m in declared}


def dataset_modules() -> set[str]:
    """The readers the dataset catalogue declares (a test's toy, a module object, has no file)."""
    from shdh.data.dataset_catalogue import DATASETS

    return {e.module for e in DATASETS.values() if isinstance(e.module, str)}


def method_modules(kinds: set[str], methods=None) -> set[str]:
    """The modules of the declared methods of these kinds (read now: a test may add a toy)."""
    declared = method_catalogue.METHODS if methods is None else methods
    return {m.module for m in declared if m.kind in kinds}


def stage_code_deps(
    dvc_yaml: Path, packages: Packages = import_graph.PACKAGES, commands=COMMANDS
) -> dict[str, list[str]]:
    """{stage: the source files (relative to dvc.yaml's folder) of the code its cmd runs}.

    A `foreach`/`do` stage is one entry: its commands differ only in ${item}, never in the step.
    A stage with `always_changed: true` runs on every repro whatever its inputs, so it gets
    none."""
    dvc_yaml = Path(dvc_yaml)
    root = dvc_yaml.parent.resolve()
    imports = import_graph.scan(root, packages)
    code = {}
    for name, stage in (_load(dvc_yaml).get("stages") or {}).items():
        body = stage.get("do", stage)
        modules: set[str] = set()
        if not body.get("always_changed"):
            for module in _command_modules(
                body.get("cmd"), imports.files, commands, dvc_yaml, name
            ):
                modules |= _code_of(imports, module, body)
        code[name] = sorted(imports.files[m].relative_to(root).as_posix() for m in modules)
    return code


def _code_of(imports: import_graph.Imports, module: str, body: Mapping) -> set[str]:
    """What running `module` can load, with the methods it loads by name for the stage."""
    whole, body_only = import_graph.reach(imports.edges, module, imports.eager)
    loaded = set()
    if LOADER in whole:
        loaded |= method_modules(stage_kinds(body))
    if DATASET_LOADER in whole:
        loaded |= dataset_modules()
    found = whole | body_only
    for name in loaded:
        if name in imports.files:  # a module outside the scanned packages has no file here
            found |= import_graph.closure(imports.edges, name, imports.eager)
    return found


def declared_code_deps(code_list: Path) -> dict[str, list[str]]:
    """{stage: its files in stage-code.json, sorted}: what the test compares."""
    stages = json.loads(Path(code_list).read_text(encoding="utf-8"))["stages"]
    return {name: sorted(files) for name, files in stages.items()}


def write_code_deps(
    dvc_yaml: Path,
    code_list: Path | None = None,
    packages: Packages = import_graph.PACKAGES,
    commands=COMMANDS,
) -> dict[str, list[str]]:
    """Write the computed lists of every stage that runs code to code_list (stage-code.json
    beside dvc.yaml), in dvc.yaml's order; returns them."""
    dvc_yaml = Path(dvc_yaml)
    code = {
        stage: files
        for stage, files in stage_code_deps(dvc_yaml, packages, commands).items()
        if files
    }
    document = {"generated_by": GENERATED_BY, "stages": code}
    target = Path(code_list) if code_list else dvc_yaml.with_name(CODE_LIST)
    atomic_write_text(target, json.dumps(document, indent=1) + "\n")
    return code


def _command_modules(cmd, files: Mapping[str, Path], commands, dvc_yaml: Path, stage: str):
    """The command module of each `ENTRY STEP` at the start of a command (`--method shdh` is an
    argument, not a command)."""
    for line in [cmd] if isinstance(cmd, str) else cmd or []:
        words = shlex.split(line)
        for i, (entry, step) in enumerate(zip(words, words[1:], strict=False)):
            if entry not in commands or (i > 0 and words[i - 1] not in _SHELL_SEPARATORS):
                continue
            candidates = [template.format(step) for template in commands[entry]]
            found = [module for module in candidates if module in files]
            if not found:
                raise ValueError(
                    f"{dvc_yaml}: stages.{stage}.cmd: `{entry} {step}` names no command module "
                    f"(looked for {', '.join(candidates)})"
                )
            yield found[0]


def _load(dvc_yaml: Path) -> dict:
    return YAML(typ="safe", pure=True).load(dvc_yaml.read_text(encoding="utf-8")) or {}


def main(argv: Sequence[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    dvc_yaml = Path(args[0] if args else "dvc.yaml")
    code_list = Path(args[1]) if len(args) > 1 else None
    for stage, paths in write_code_deps(dvc_yaml, code_list).items():
        print(f"{stage}: {len(paths)} code files")
    return 0


if __name__ == "__main__":
    sys.exit(main())
