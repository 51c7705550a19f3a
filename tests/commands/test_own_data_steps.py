"""A user's own hierarchy through the step commands: repeated names, every reader option as a
setting, a tree JSON, and outputs that fail early and by name."""

from __future__ import annotations

import json
import shutil
import time

import numpy as np
import pytest
import yaml
from PIL import Image

from shdh.cli import main
from shdh.core.hierarchy import LabelTree
from shdh.data.dataset import load_dataset
from shdh.data.folder import SHAPE_LEAVES, make_shapes_folder
from tests.commands.test_steps import run_steps, smoke_params
from tests.conftest import REPO
from tests.readonly import read_only, run_without_override


@pytest.fixture
def shapes(tmp_path):
    return make_shapes_folder(tmp_path / "shapes", n_per_leaf=3)


def test_a_folder_tree_with_repeated_names_and_every_reader_setting(tmp_path, shapes, caplog):
    # an item labelled at an inner node: warm/red, above warm/red/circle
    Image.fromarray(np.zeros((16, 16, 3), dtype=np.uint8)).save(shapes / "warm" / "red" / "x.png")
    data = {"dataset": "folder", "color": False, "image_size": 12, "name": "mine", "workers": 0}
    params = smoke_params(tmp_path, shapes, data=data)
    assert main(["prepare", "--params", str(params)]) == 1
    assert "label 'warm/red' is an inner node" in caplog.text
    assert "set data.inner_labels: true" in caplog.text
    params = smoke_params(tmp_path, shapes, data={**data, "inner_labels": True})
    run_steps(params, ["prepare"], ["tree"])
    ds = load_dataset(tmp_path / "prepared" / "dataset")
    assert ds.name == "mine" and ds.images.shape == (3 * 12 + 1, 12, 12)
    tree = LabelTree.load(tmp_path / "tree" / "tree.json")
    assert tree.names[0] == "mine" and tree.names.count("circle") == tree.names.count("red") * 6
    ancestors = np.load(tmp_path / "tree" / "ancestors.npy")
    inner = ds.labels.tolist().index("warm/red")
    assert ancestors[inner, 3] == -1 and ancestors[inner, 2] >= 0
    circles = {
        tree.path(int(a))
        for a, label in zip(ancestors[:, 3], ds.labels, strict=True)
        if label.endswith("/circle")
    }
    assert len(circles) == 6  # one circle node per colour, all named "circle"


def test_a_table_with_its_own_columns_and_repeated_names(tmp_path, shapes):
    rows = ["file,class_path"] + [
        f"shapes/{leaf}/{leaf.rsplit('/', 1)[1]}_{i:03d}.png,{leaf}"
        for leaf in SHAPE_LEAVES
        for i in range(3)
    ]
    table = tmp_path / "labels.csv"
    table.write_text("\n".join(rows) + "\n")
    columns = {"image_column": "file", "label_column": "class_path"}
    params = smoke_params(tmp_path, table, data={"dataset": "table", "table": columns})
    run_steps(params, ["prepare"], ["tree"])
    tree = LabelTree.load(tmp_path / "tree" / "tree.json")
    assert tree.names[0] == "labels" and tree.names.count("square") == 6


def test_a_tree_json_with_repeated_names_and_a_label_it_lacks(tmp_path, shapes, caplog):
    tree_file = tmp_path / "tree.json"
    tree_file.write_text(
        json.dumps({"format": "shdh-label-tree/1", "root": "shapes", "paths": list(SHAPE_LEAVES)})
    )
    params = smoke_params(
        tmp_path, shapes, data={"dataset": "folder"}, tree={"source": str(tree_file)}
    )
    run_steps(params, ["prepare"], ["tree"])
    assert LabelTree.load(tmp_path / "tree" / "tree.json") == LabelTree.load(tree_file)
    tree_file.write_text(
        json.dumps(
            {"format": "shdh-label-tree/1", "root": "shapes", "paths": list(SHAPE_LEAVES[1:])}
        )
    )
    assert main(["tree", "--params", str(params)]) == 1
    assert f"tree.source {tree_file}: the data's label of item 24: label path " in caplog.text
    assert "'warm/red/circle' is not in the tree" in caplog.text
    assert "np.str_" not in caplog.text


def test_a_read_only_results_folder_fails_before_any_ranking_naming_it(tmp_path):
    """The inputs are not even there: the check comes before anything is read or ranked."""
    results = read_only(tmp_path / "results")
    params = smoke_params(tmp_path, tmp_path / "raw", data={"prepared_dir": str(tmp_path / "no")})
    start = time.perf_counter()
    proc = run_without_override(["-m", "shdh.cli", "evaluate", "--params", str(params)])
    assert proc.returncode == 1, proc.stderr
    assert f"evaluate.results_dir: {results}: cannot write there (Permission denied)" in proc.stderr
    assert "Traceback" not in proc.stderr and time.perf_counter() - start < 60
    assert yaml.safe_load(params.read_text())["evaluate"]["results_dir"] == str(results)


def test_a_misspelt_raw_dir_is_named_by_every_command_not_taken_for_a_results_clash(
    tmp_path, shapes, monkeypatch, caplog
):
    """The results point at results/shapes/smoke; a misspelt folder would name the dataset
    `shapez`, whose results that folder is not: the key is named instead, by the inputs stage
    (which `dvc repro` runs first), prepare and the steps after it."""
    monkeypatch.chdir(tmp_path)
    shutil.copy(REPO / "dvc.yaml", tmp_path / "dvc.yaml")  # a checkout: results/ is owned
    results = {"results_dir": "results/shapes/smoke", "report": "results/shapes/smoke/report.md"}
    params = smoke_params(tmp_path, "shapez", data={"dataset": "folder"}, evaluate=results)
    for step in ("inputs", "prepare", "tree", "evaluate"):
        caplog.clear()
        assert main([step, "--params", str(params)]) == 1, step
        assert f"{params}: data.raw_dir: shapez does not exist (data.dataset: folder" in caplog.text
        assert "would overwrite them" not in caplog.text
    params = smoke_params(tmp_path, "shapes.csv", data={"dataset": "table"}, evaluate=results)
    assert main(["inputs", "--params", str(params)]) == 1
    assert f"{params}: data.raw_dir: shapes.csv does not exist (data.dataset: table" in caplog.text
    params = smoke_params(tmp_path, "shapes", data={"dataset": "folder"}, evaluate=results)
    assert main(["inputs", "--params", str(params), "--out", "rec"]) == 0


def test_the_inputs_step_refuses_bad_labels_before_prepare_runs(tmp_path, shapes, caplog):
    rows = [
        "image,label",
        "shapes/warm/red/circle/circle_000.png,warm/red/circle",
        "shapes/warm/red/circle/circle_001.png,warm/red",
        "shapes/warm/red/circle/nope.png,warm/red/circle",
    ]
    table = tmp_path / "labels.csv"
    table.write_text("\n".join(rows) + "\n")
    params = smoke_params(tmp_path, table, data={"dataset": "table"})
    assert main(["inputs", "--params", str(params), "--out", str(tmp_path / "rec")]) == 1
    assert f"{table}: line 4: column 'image': image file 'shapes/warm/red/circle/nope.png'" in (
        caplog.text
    )
    table.write_text("\n".join(rows[:3]) + "\n")
    caplog.clear()
    assert main(["inputs", "--params", str(params), "--out", str(tmp_path / "rec")]) == 1
    assert f"{table}: line 3 (shapes/warm/red/circle/circle_001.png): label 'warm/red' is an " in (
        caplog.text
    )
