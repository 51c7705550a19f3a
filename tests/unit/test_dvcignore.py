"""The repository's .dvcignore keeps a fit's run facts (its timings, its MLflow run, its
checkpoint) out of its model folder's DVC hash: the same model trained again leaves dvc.lock
and the cache as they were, and a changed model still changes them. Checked with DVC itself
on the folders params.yaml names, laid out by shdh.plan.fits."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from shdh.plan.fits import FIT_RECORD, HASHER_DIR, HISTORY, RUN_REF, WORK_DIR, model_dir
from tests.conftest import REPO

PARAMS = yaml.safe_load((REPO / "params.yaml").read_text())


def write_fit(folder: Path, model: str, facts: str, deep: bool) -> None:
    """A fit's folder as the train and baselines steps leave it, with `model` in its hasher and
    `facts` in every file that records how this run of it went."""
    (folder / HASHER_DIR).mkdir(parents=True, exist_ok=True)
    (folder / HASHER_DIR / "params.json").write_text(model)
    (folder / FIT_RECORD).write_text(facts)
    (folder / RUN_REF).write_text(facts)
    if deep:
        (folder / HISTORY).write_text(facts)
        (folder / WORK_DIR).mkdir(exist_ok=True)
        (folder / WORK_DIR / "checkpoint.pt").write_text(facts)


@pytest.fixture
def repo(tmp_path):
    from dvc.repo import Repo

    shutil.copyfile(REPO / ".dvcignore", tmp_path / ".dvcignore")
    with Repo.init(str(tmp_path), no_scm=True) as dvc_repo:
        yield dvc_repo


@pytest.mark.parametrize(
    ("models_dir", "method", "deep"),
    [
        (PARAMS["train"]["models_dir"], "shdh", True),
        (PARAMS["baselines"]["models_dir"], "ksh", False),
    ],
)
def test_a_fit_run_again_keeps_its_hash_and_a_changed_model_changes_it(
    repo, models_dir, method, deep
):
    root = Path(repo.root_dir)
    folder = model_dir(root / models_dir, method, 16, None)
    write_fit(folder, "weights A", "run 1: 20.4 s, run id 6d58", deep)
    (out,) = repo.add(str(root / models_dir / method))
    first = out.outs[0].hash_info.value
    assert repo.status() == {}

    write_fit(folder, "weights A", "run 2: 21.9 s, run id fab7", deep)  # the same model again
    assert repo.status() == {}, "a fit's run facts changed its model folder's hash"
    assert (folder / FIT_RECORD).read_text().startswith("run 2")  # kept in the workspace

    write_fit(folder, "weights B", "run 3", deep)
    assert repo.status() != {}, "a changed model left its folder's hash as it was"
    (out,) = repo.add(str(root / models_dir / method))
    assert out.outs[0].hash_info.value != first
