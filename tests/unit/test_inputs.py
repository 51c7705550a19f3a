"""The inputs record: the files each stage reads beyond dvc.yaml's paths, by content hash."""

from __future__ import annotations

import copy
import json
import os

import pytest

from shdh.cli import main
from shdh.data.folder import make_shapes_folder
from shdh.data.idx import DataFormatError
from shdh.settings.profiles import load_params
from shdh.steps.input_hashes import hashes, load_code_list, stage_inputs, write_records
from tests.conftest import REPO

PARAMS = load_params(REPO / "params.yaml")


@pytest.fixture
def own(tmp_path, monkeypatch):
    """Params of a table dataset with a tree file and an alpha sweep, in tmp_path."""
    monkeypatch.chdir(tmp_path)
    make_shapes_folder("shapes", n_per_leaf=1)
    (tmp_path / "t.csv").write_text(
        "image,label\nshapes/warm/red/circle/circle_000.png,warm/red/circle\n"
        "shapes/cool/blue/square/square_000.png,cool/blue/square\n"
    )
    (tmp_path / "tree.json").write_text("{}")
    (tmp_path / "sweep.json").write_text("[]")
    params = copy.deepcopy(PARAMS)
    params["data"].update(dataset="table", raw_dir="t.csv")
    params["tree"]["source"] = "tree.json"
    params["evaluate"]["alpha_sweep"] = "sweep.json"
    return params


def test_each_stage_lists_the_files_only_params_name(own):
    found = {stage: [p.as_posix() for p in paths] for stage, paths in stage_inputs(own).items()}
    assert found["prepare"][0].endswith("shapes/warm/red/circle/circle_000.png")
    assert len(found["prepare"]) == 2
    assert found["tree"] == ["tree.json"] and found["evaluate"] == ["sweep.json"]
    own["tree"]["source"] = "builtin:cifar100"
    own["evaluate"]["alpha_sweep"] = "not-there-yet.json"  # drawn only once it exists
    own["data"].update(dataset="folder", raw_dir="shapes")  # itself a dvc.yaml dependency
    assert stage_inputs(own) == {"prepare": [], "tree": [], "evaluate": []}
    own["tree"]["source"] = "missing.json"
    with pytest.raises(FileNotFoundError, match="^tree.source: missing.json: no such tree file"):
        stage_inputs(own)


def test_records_change_exactly_when_a_file_does(own, tmp_path):
    first = {s: p.read_text() for s, p in write_records(own, "rec").items()}
    record = json.loads(first["prepare"])
    assert record["stage"] == "prepare" and len(record["files"]) == 2
    assert json.loads(first["tree"])["files"] == {"tree.json": "99914b932bd37a50b983c5e7c90ae93b"}
    again = {s: p.read_text() for s, p in write_records(own, "rec").items()}
    assert again == first  # same content: DVC sees the stages unchanged
    (tmp_path / "tree.json").write_text('{"x": 1}')
    changed = {s: p.read_text() for s, p in write_records(own, "rec").items()}
    assert [s for s in changed if changed[s] != first[s]] == ["tree"]


def test_each_stage_with_code_gets_a_record_that_follows_its_code(own, tmp_path):
    """A stage's code is hashed into its own record, beside the files params.yaml names: an edit
    of a module changes the records of the stages whose list names it, and no other."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "shared.py").write_text("A = 1\n")
    (tmp_path / "src" / "train_only.py").write_text("B = 2\n")
    (tmp_path / "stage-code.json").write_text(
        json.dumps(
            {"stages": {"tree": ["src/shared.py"], "train": ["src/shared.py", "src/train_only.py"]}}
        )
    )
    code = load_code_list("stage-code.json")
    first = {s: p.read_text() for s, p in write_records(own, "rec", code).items()}
    assert list(first) == ["tree", "train", "prepare", "evaluate"]  # the list's order first
    train = json.loads(first["train"])
    assert train == {
        "stage": "train",
        "files": {},
        "code": {
            "src/shared.py": "f177efe7d7ebb2dcf9c50bd7e9342231",
            "src/train_only.py": "33937aaec6cfc966b35a6b1ef6365f5c",
        },
    }
    assert json.loads(first["tree"])["files"] == {"tree.json": "99914b932bd37a50b983c5e7c90ae93b"}
    assert "code" not in json.loads(first["prepare"])  # no code listed for it here
    (tmp_path / "src" / "train_only.py").write_text("B = 3\n")
    changed = {s: p.read_text() for s, p in write_records(own, "rec", code).items()}
    assert [s for s in changed if changed[s] != first[s]] == ["train"]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        (None, r"^stage-code\.json: no such file: the code each DVC stage runs \(`make dvc-deps`"),
        ("{", r"^stage-code\.json: not JSON: "),
        ('{"stages": ["src/a.py"]}', r"^stage-code\.json: stages: expected an object"),
        ('{"stages": {"train": "src/a.py"}}', r"^stage-code\.json: stages\.train: expected a list"),
        (
            '{"stages": {"train": ["src/gone.py"]}}',
            r"^stage-code\.json: stages\.train: src/gone\.py: no such file; the list is out of "
            r"date \(`make dvc-deps` regenerates it\)",
        ),
    ],
)
def test_a_missing_or_malformed_code_list_is_named_with_its_field(
    tmp_path, monkeypatch, text, error
):
    monkeypatch.chdir(tmp_path)
    if text is not None:
        (tmp_path / "stage-code.json").write_text(text)
    with pytest.raises((OSError, ValueError), match=error):
        load_code_list("stage-code.json")


def test_a_file_whose_size_and_time_are_unchanged_is_not_read_again(tmp_path):
    path = tmp_path / "a.bin"
    path.write_bytes(b"one")
    cache: dict = {}
    before = hashes([path], cache)
    stat = path.stat()
    path.write_bytes(b"two")  # same size; put the time back as a copy tool might
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert hashes([path], cache) == before
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    assert hashes([path], cache) != before


def test_own_data_is_checked_as_prepare_would_without_decoding_an_image(own, tmp_path, monkeypatch):
    """The inputs stage runs before DVC deletes prepare's outputs: a label or file error found
    here costs nothing, one found by prepare costs the last good prepared data."""

    def no_decoding(*args, **kwargs):
        raise AssertionError("the inputs stage decoded an image")

    monkeypatch.setattr("shdh.data.images.decode_image", no_decoding)
    (tmp_path / "t.csv").write_text(
        "image,label\nshapes/warm/red/circle/circle_000.png,warm/red/circle\n"
        "shapes/cool/blue/square/square_000.png,warm/red\n"
    )
    with pytest.raises(DataFormatError, match=r"^t\.csv: line 3 \(shapes/cool/blue/square/"):
        write_records(own, "rec")
    own["data"]["inner_labels"] = True
    assert len(stage_inputs(own)["prepare"]) == 2
    own["data"].update(dataset="folder", raw_dir="shapes", inner_labels=False)
    stray = tmp_path / "shapes" / "warm" / "red" / "x.png"
    stray.write_bytes(b"not even an image: the stage does not decode it")
    with pytest.raises(DataFormatError, match=r"x\.png: label 'warm/red' is an inner node"):
        stage_inputs(own)
    own["data"]["name"] = "a|b"
    own["data"]["inner_labels"] = True
    with pytest.raises(DataFormatError, match=r"^name: name 'a\|b' contains '\|'"):
        stage_inputs(own)
    assert not (tmp_path / "rec").exists()


def test_the_command_needs_the_list_only_where_it_is_named(own, tmp_path, caplog):
    """dvc.yaml names stage-code.json, so a checkout without it fails; outside a checkout (no
    list, none named) the records hold the other inputs alone; one beside them is read."""
    params = tmp_path / "params.yaml"
    params.write_text(json.dumps(own))  # JSON is YAML
    args = ["inputs", "--params", str(params), "--out", "rec"]
    assert main([*args, "--code", "stage-code.json"]) == 1
    assert "stage-code.json: no such file: the code each DVC stage runs" in caplog.text
    assert main(args) == 0
    assert "code" not in json.loads((tmp_path / "rec" / "tree.json").read_text())
    (tmp_path / "stage-code.json").write_text('{"stages": {"tree": ["tree.json"]}}')
    assert main(args) == 0
    assert json.loads((tmp_path / "rec" / "tree.json").read_text())["code"] == {
        "tree.json": "99914b932bd37a50b983c5e7c90ae93b"
    }
