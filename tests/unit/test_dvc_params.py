"""Every setting that can change a stage's output is one of the stage's params in dvc.yaml, so a
`dvc exp run -S train.backbone=resnet18` reruns training instead of serving the codes of the
old backbone. The settings come from their declarations (shdh.settings.sections); a setting a
stage may leave out is named here with the reason its output does not depend on it."""

from __future__ import annotations

import dataclasses

import pytest
import yaml

from shdh.settings import sections
from tests.conftest import REPO

# setting -> why the stage's output does not depend on it
NOT_PARAMS = {
    "prepare": {
        "raw_dir": "a dependency path of the stage: DVC hashes the files themselves",
        "sources": "where `shdh fetch` looks; the files are checked by their md5",
        "download_fallback": "how a Kubeflow step gets the raw files, not what they are",
        "prepared_dir": "the outputs' place",
        "workers": "decoding processes; the prepared images are the same",
    },
    "train": {
        "methods": "the stage's foreach: one stage per method",
        "models_dir": "the outputs' place",
        "loader_workers": "the same batches, bit for bit (tests/unit/test_loader.py)",
        "checkpoint_seconds": "a resumed fit ends as the uninterrupted one",
        "cuda_graph": "the graph replays the eager step's kernels",
        "nodes": "read by the Kubeflow DAG; the DVC stage trains in one process",
        "processes_per_node": "read by the Kubeflow DAG; the DVC stage trains in one process",
    },
}
SECTIONS = {"prepare": ("data", sections.DataSettings), "train": ("train", sections.TrainSettings)}


def stage_params(stage: str) -> list[str]:
    declared = yaml.safe_load((REPO / "dvc.yaml").read_text())["stages"][stage]
    return (declared.get("do") or declared)["params"]


@pytest.mark.parametrize("stage", sorted(SECTIONS))
def test_every_setting_that_changes_a_stages_output_is_one_of_its_params(stage):
    prefix, settings = SECTIONS[stage]
    methods = {m.replace("+", "_") for m in sections.DEEP_METHODS}  # train.${item}
    names = {f.name for f in dataclasses.fields(settings)} - methods
    listed = {p.removeprefix(f"{prefix}.") for p in stage_params(stage) if p.startswith(prefix)}
    missing = sorted(names - listed - set(NOT_PARAMS[stage]))
    assert not missing, f"dvc.yaml stage {stage}: settings missing from its params: {missing}"
    listed_anyway = sorted(listed & set(NOT_PARAMS[stage]))
    assert not listed_anyway, f"dvc.yaml stage {stage}: listed, said not to matter: {listed_anyway}"
    unknown = sorted(listed - names - {"${item}"})
    assert not unknown, f"dvc.yaml stage {stage}: params that are no settings: {unknown}"


def test_every_train_param_has_a_value_in_params_yaml():
    """DVC refuses a stage whose param is missing from params.yaml; a setting with a default in
    code alone would make the train stages fail to run."""
    train = yaml.safe_load((REPO / "params.yaml").read_text())["train"]
    for param in stage_params("train"):
        key = param.removeprefix("train.")
        assert param == "seed" or key == "${item}" or key in train, f"params.yaml: no train.{key}"
