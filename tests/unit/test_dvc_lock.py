"""The committed dvc.lock matches the code it is committed with: each stage's record of its code
(artifacts/inputs/STAGE.json, what the `inputs` stage writes from stage-code.json) hashes, at
HEAD, to the md5 dvc.lock holds for it. Otherwise a fresh clone's `dvc repro` reruns stages
whose code did not change, and `make run` leaves dvc.lock modified.

When this fails after a code change: run the pipeline (`make run`, or `dvc repro`) and commit
the dvc.lock it writes with the change."""

from __future__ import annotations

import hashlib

import yaml

from shdh import settings
from shdh.steps.input_hashes import CODE_LIST, load_code_list, write_records
from tests.conftest import REPO

RECORDS = "artifacts/inputs/"


def locked_records() -> dict[str, str]:
    """{stage: the md5 dvc.lock holds for its record of inputs}, foreach stages (train@METHOD)
    under their stage's name: they depend on the one record of their stage."""
    stages = yaml.safe_load((REPO / "dvc.lock").read_text())["stages"]
    found: dict[str, str] = {}
    for name, stage in stages.items():
        for dep in stage.get("deps", []):
            if dep["path"].startswith(RECORDS):
                record = dep["path"].removeprefix(RECORDS).removesuffix(".json")
                assert found.setdefault(record, dep["md5"]) == dep["md5"], (name, record)
    return found


def test_the_locks_records_of_the_code_are_what_the_code_at_head_hashes_to(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # the records name the files relative to the checkout
    params = settings.validate(settings.load_params(REPO / "params.yaml")).params
    written = write_records(params, tmp_path, load_code_list(REPO / CODE_LIST))
    now = {stage: hashlib.md5(path.read_bytes()).hexdigest() for stage, path in written.items()}
    locked = locked_records()
    assert locked, "dvc.lock records no stage's inputs"
    stale = sorted(stage for stage, md5 in locked.items() if now.get(stage) != md5)
    assert not stale, (
        f"dvc.lock's records of {stale} are not what the code at HEAD hashes to: run the "
        "pipeline (make run) and commit its dvc.lock"
    )
