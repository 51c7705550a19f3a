"""The two front doors on the same settings: the DVC stages and the Kubeflow pipeline.

Shared by the tests that compare them and the MLflow-server integration test. The DVC side runs
the commands of dvc.yaml itself (its matrices expanded from params, in its stage order) through
`shdh`'s entry point in this process: the commands `dvc repro` runs, without DVC's scheduling
(tests/e2e runs the real `dvc repro`).
"""

from __future__ import annotations

import itertools
import re
import shlex
from collections.abc import Collection
from pathlib import Path
from typing import Any

import yaml

from shdh.cli import main
from shdh.kubeflow import resolve_params
from shdh.settings.profiles import deep_merge
from tests.conftest import REPO, as_dvc_stage

_REF = re.compile(r"\$\{([^}]+)\}")


def smoke_settings(methods: Collection[str] | None = None) -> dict[str, Any]:
    """params.yaml with the smoke profile: what `shdh pipeline run --local --profile smoke` and
    `shdh profile apply smoke && dvc repro` both run, with torch's CPU thread count pinned.

    Trained weights depend on the thread count (it changes the order of float sums), and the
    front doors run training in different processes: kfp.local in subprocesses, the DVC commands
    here in pytest's process. Pinned, the two agree bit for bit on any machine.

    `methods` keeps a subset of the smoke methods (deep and shallow alike): each method is one
    more task and ~10 s of process start-up, and the DAG treats every method the same way.
    """
    params = resolve_params(REPO / "params.yaml", "smoke", profiles_dir=REPO / "profiles")
    params = deep_merge(params, {"train": {"num_threads": 1}})
    if methods is not None:
        for section in ("train", "baselines"):
            params[section]["methods"] = [m for m in params[section]["methods"] if m in methods]
        kept = {*params["train"]["methods"], *params["baselines"]["methods"]}
        assert kept == set(methods), f"not smoke methods: {set(methods) - kept}"
    return params


def dvc_params_file(params: dict[str, Any], workdir: Path) -> Path:
    """The same settings with every path inside workdir (paths change no result)."""
    paths = {
        "data": {
            "raw_dir": str(workdir / "data" / "fashion-mnist"),
            "prepared_dir": str(workdir / "artifacts" / "prepared"),
        },
        "tree": {"out_dir": str(workdir / "artifacts" / "tree")},
        "smatrix": {"out": str(workdir / "artifacts" / "smatrix.npz")},
        "features": {"out": str(workdir / "artifacts" / "gist.npy")},
        "train": {"models_dir": str(workdir / "artifacts" / "models")},
        "baselines": {"models_dir": str(workdir / "artifacts" / "baselines")},
        "evaluate": {
            "results_dir": str(workdir / "results"),
            "report": str(workdir / "docs" / "results.md"),
        },
        "index": {"out_dir": str(workdir / "artifacts" / "index")},
    }
    path = workdir / "params.yaml"
    workdir.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(deep_merge(params, paths), sort_keys=False))
    return path


def dvc_commands(params: dict[str, Any], dvc_file: Path = REPO / "dvc.yaml") -> list[str]:
    """Every stage command of dvc.yaml in order, with `foreach` and `matrix` stages expanded as
    DVC does."""

    def lookup(path: str, item: dict[str, Any]) -> Any:
        node: Any = {**params, "item": item}
        for part in path.split("."):
            node = node[part]
        return node

    commands = []
    for stage in yaml.safe_load(dvc_file.read_text())["stages"].values():
        if "foreach" in stage:  # foreach: ${list} / do: {cmd: ... ${item} ...}
            for item in lookup(_REF.fullmatch(stage["foreach"]).group(1), {}):
                commands.append(
                    _REF.sub(lambda m, i=item: str(lookup(m.group(1), i)), stage["do"]["cmd"])
                )
            continue
        matrix = stage.get("matrix", {})
        axes = [
            lookup(_REF.fullmatch(v).group(1), {}) if isinstance(v, str) else v
            for v in matrix.values()
        ]
        for values in itertools.product(*axes):
            item = dict(zip(matrix, values, strict=True))
            commands.append(_REF.sub(lambda m, i=item: str(lookup(m.group(1), i)), stage["cmd"]))
    return commands


def run_dvc_stages(params_file: Path, params: dict[str, Any]) -> list[str]:
    """`shdh fetch` (what data.dvc stands for), then every dvc.yaml command, in this process."""
    commands = ["shdh fetch", *dvc_commands(params)]
    for command in commands:
        run_dvc_command(command, params_file)
    return commands


def run_dvc_command(command: str, params_file: Path) -> None:
    """One of dvc.yaml's commands with the params file, in this process, as DVC runs a stage's.
    The paths a command names itself (`--out artifacts/...`), which DVC resolves in the
    repository, go under the params file's folder with every other output."""
    argv = [_inside(arg, params_file.parent) for arg in shlex.split(command)]
    assert argv[0] == "shdh", command
    with as_dvc_stage(argv[1]):
        assert main([*argv[1:], "--params", str(params_file)]) == 0, command


def _inside(arg: str, workdir: Path) -> str:
    """A command's argument, with a repository path of the pipeline's outputs moved into
    workdir."""
    return str(workdir / arg) if arg.split("/", 1)[0] in ("artifacts", "results") else arg
