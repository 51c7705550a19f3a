"""A user's own photos through DVC, in a fresh copy of the repository.

The folder tree of docs/own-data.md, whose leaf names repeat under every colour (2 families >
6 colours > circle and square), on the photos-smoke profile: ResNet-18 at 64 px from a weights
file that torchvision's own resnet18 saved from a seed (no ImageNet weights can be downloaded
here), two epochs, one deep and one shallow method, run by `dvc exp run` with the backbone, the
weights and the image size spelt out. It must train, score with the paper's metrics and the
peers' mAP, log the backbone and the weights' SHA-256, register the encoder and index the
database, and the search service must encode an uploaded photo with that backbone and find the
photo itself. Then every input that params.yaml names is edited in turn (the folder, a tree JSON,
a table and its images, the alpha sweep) and DVC must see the stage that reads it as changed.
Throughout, the project's published Fashion-MNIST-H results stay byte for byte as they are.

One run serves all: a `dvc exp run` on two cores is two minutes of stage start-ups.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
from pathlib import Path

import mlflow
import numpy as np
import pytest
import requests
import yaml
from PIL import Image

from shdh.core.hierarchy import LabelTree
from shdh.data.dataset import load_dataset
from shdh.data.folder import SHAPE_LEAVES, make_shapes_folder
from shdh.serving import RegisteredModel, create_app
from shdh.settings.profiles import deep_merge, load_params
from tests.conftest import REPO
from tests.e2e.clone import clone_repo, record_inputs, sh
from tests.photos import seeded_resnet18
from tests.serving.server import AUTH, TOKEN, serving

pytestmark = pytest.mark.slow
PUBLISHED = (
    "docs/results.md",
    "docs/results-paper.md",
    "results/metrics.json",
    "results/table.md",
    "results/curves.npz",
    "results/paper/metrics.json",
)
RESULTS = Path("results/shapes/photos-smoke")
WEIGHTS = "weights/resnet18-seed0.pth"


def set_params(dest: Path, **sections) -> None:
    params = deep_merge(load_params(dest / "params.yaml"), sections)
    (dest / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))


@pytest.fixture(scope="module")
def reproduced(tmp_path_factory):
    """The clone with shapes/ (12 leaves x 5 photos of 64 px) selected, the seeded weights file
    and the photos-smoke profile applied after it (results in results/shapes/photos-smoke),
    after `dvc exp run` with the settings spelt out; its output comes with it."""
    dest = tmp_path_factory.mktemp("own") / "shdh"
    env = clone_repo(dest)
    make_shapes_folder(dest / "shapes", n_per_leaf=5, size=64)
    seeded_resnet18(dest / WEIGHTS)
    set_params(dest, data={"dataset": "folder", "raw_dir": "shapes"})
    applied = sh(["shdh", "profile", "apply", "photos-smoke"], dest, env)
    assert f"results go to {RESULTS}" in applied
    sh(["git", "commit", "-qam", "photos-smoke"], dest, env)
    settings = ["train.backbone=resnet18", f"train.pretrained={WEIGHTS}", "data.image_size=64"]
    out = sh(["dvc", "exp", "run", *[a for s in settings for a in ("-S", s)]], dest, env)
    return dest, env, out


@pytest.fixture
def shapes(reproduced, tmp_path):
    """A copy of the reproduced clone for one test to edit: each test that changes inputs starts
    from the same state, whichever tests ran before it. With the weights file, the checkpoint
    and DVC's cache of both, a copy takes seconds; rerunning the stages would take minutes."""
    source, env, _ = reproduced
    dest = tmp_path / "shdh"
    shutil.copytree(source, dest, symlinks=True)
    return dest, {**env, "MLFLOW_TRACKING_URI": f"sqlite:///{dest / 'mlflow.db'}"}


def test_a_tree_with_repeated_leaf_names_runs_through_dvc(reproduced):
    dest, _, out = reproduced
    for stage in (
        "inputs",
        "prepare",
        "tree",
        "smatrix",
        "features",
        "train@shdh",
        "baselines",
        "evaluate",
        "register",
        "index",
    ):
        assert f"Running stage '{stage}'" in out, stage
    tree = LabelTree.load(dest / "artifacts" / "tree" / "tree.json")
    assert tree.names[0] == "shapes" and tree.names.count("circle") == 6
    assert sorted(tree.path(leaf) for leaf in tree.leaves) == sorted(SHAPE_LEAVES)
    metrics = json.loads((dest / RESULTS / "metrics.json").read_text())
    assert set(metrics) == {"shdh", "itq", "random"}
    report = dest / RESULTS / "report.md"
    assert f"report: {RESULTS / 'report.md'}" in out
    text = report.read_text()
    assert text.startswith("# Results: shapes") and "| SHDH |" in text
    assert "Fashion" not in text
    for published in PUBLISHED:
        assert (dest / published).read_bytes() == (REPO / published).read_bytes(), published


def test_the_photos_run_trains_scores_registers_and_indexes(reproduced):
    dest, env, _ = reproduced
    metrics = json.loads((dest / RESULTS / "metrics.json").read_text())
    scores = metrics["shdh"]["16"]
    for key in ("ndcg@100", "map@1000", "map@all", "mahp@2500"):
        assert 0 <= scores[key] <= 1, key
    fit = json.loads((dest / "artifacts/models/shdh/shdh-16/fit.json").read_text())
    sha = hashlib.sha256((dest / WEIGHTS).read_bytes()).hexdigest()
    assert fit["backbone"] == "resnet18" and fit["pretrained_sha256"] == sha
    mlflow.set_tracking_uri(env["MLFLOW_TRACKING_URI"])
    runs = mlflow.search_runs(
        search_all_experiments=True, filter_string="tags.backbone = 'resnet18'"
    )
    assert len(runs) >= 1 and set(runs["tags.pretrained_sha256"]) == {sha}
    assert set(runs["params.augment"]) == {"True"}


def database_photo(dest: Path) -> tuple[Path, int]:
    """A photo of the database (not a query) and its item id: the prepared image equal to the
    decoded file names it."""
    ds = load_dataset(dest / "artifacts" / "prepared" / "dataset")
    in_index = set(np.load(dest / "artifacts" / "index" / "index.npz")["item_ids"].tolist())
    for photo in sorted((dest / "shapes").rglob("*.png")):
        pixels = np.asarray(Image.open(photo).convert("RGB"))
        same = [i for i in range(len(ds.ids)) if np.array_equal(ds.images[i], pixels)]
        if same and int(ds.ids[same[0]]) in in_index:
            return photo, int(ds.ids[same[0]])
    raise AssertionError("no database photo found")


def test_the_service_encodes_an_uploaded_photo_with_the_registered_backbone(
    reproduced, monkeypatch
):
    dest, env, _ = reproduced
    monkeypatch.setenv("MLFLOW_TRACKING_URI", env["MLFLOW_TRACKING_URI"])
    photo, item_id = database_photo(dest)
    source = RegisteredModel("shdh-encoder", "champion")
    with serving(create_app(dest / "artifacts" / "index", encoder=source, token=TOKEN)) as url:
        body = {"images": [base64.b64encode(photo.read_bytes()).decode()], "k": 200}
        answer = requests.post(f"{url}/search/images", json=body, headers=AUTH, timeout=120)
    assert answer.status_code == 200, answer.text
    hits = answer.json()["results"][0]["hits"]
    # the upload's code is the one the index holds for that photo: the same backbone, the same view
    assert {"item_id": item_id, "distance": 0} in [
        {"item_id": h["item_id"], "distance": h["distance"]} for h in hits
    ]


def changed_stages(dest: Path, env: dict[str, str]) -> set[str]:
    """The stages `dvc status` reports as changed once the inputs stage has recorded the files."""
    record_inputs(dest)
    status = json.loads(sh(["dvc", "status", "--json"], dest, env))
    return set(status) - {"inputs", "data.dvc"}  # inputs always runs; data/ is not fetched here


def test_editing_each_input_reruns_the_stage_that_reads_it(shapes):
    dest, env = shapes
    assert changed_stages(dest, env) == set()
    # the alpha sweep that evaluate draws
    sweep = dest / "results" / "alpha_sweep.json"
    sweep.write_text(sweep.read_text() + "\n")
    assert changed_stages(dest, env) == {"evaluate"}
    # an image of the folder tree: the prepare stage reads the folder
    image = dest / "shapes" / "cool" / "blue" / "circle" / "circle_000.png"
    Image.fromarray(np.zeros((16, 16, 3), dtype=np.uint8)).save(image)
    assert "prepare" in changed_stages(dest, env)
    assert "Running stage 'prepare'" in sh(["dvc", "repro", "prepare"], dest, env)
    # a tree JSON file as tree.source (names repeat in it too), then an edit of that file
    tree_file = dest / "trees" / "shapes.json"
    tree_file.parent.mkdir()
    LabelTree.from_paths(sorted(SHAPE_LEAVES), root="shapes").save(tree_file)
    set_params(dest, tree={"source": "trees/shapes.json"})
    assert "Running stage 'tree'" in sh(["dvc", "repro", "tree"], dest, env)
    assert "tree" not in changed_stages(dest, env)
    tree_file.write_text(
        json.dumps(
            {"format": "shdh-label-tree/1", "root": "shapes", "paths": list(reversed(SHAPE_LEAVES))}
        )
    )
    assert "tree" in changed_stages(dest, env)
    out = sh(["dvc", "repro", "tree"], dest, env)
    assert "Running stage 'tree'" in out and "Running stage 'prepare'" not in out
    tree = LabelTree.load(dest / "artifacts" / "tree" / "tree.json")
    assert tree.path(tree.leaves[0]) == SHAPE_LEAVES[-1]  # the edited file's node order


def test_a_table_and_the_images_it_names_are_inputs_of_download(shapes):
    dest, env = shapes
    rows = ["image,label"] + [
        f"shapes/{leaf}/{Path(leaf).name}_{i:03d}.png,{leaf}"
        for leaf in SHAPE_LEAVES
        for i in range(3)
    ]
    (dest / "shapes.csv").write_text("\n".join(rows) + "\n")
    set_params(dest, data={"dataset": "table", "raw_dir": "shapes.csv"}, tree={"source": "dataset"})
    assert "Running stage 'prepare'" in sh(["dvc", "repro", "prepare"], dest, env)
    assert "prepare" not in changed_stages(dest, env)
    image = dest / "shapes" / "warm" / "red" / "square" / "square_001.png"  # named by the table
    Image.fromarray(np.full((16, 16, 3), 255, dtype=np.uint8)).save(image)
    assert "prepare" in changed_stages(dest, env)
    sh(["dvc", "repro", "prepare"], dest, env)
    (dest / "shapes.csv").write_text("\n".join(rows[:-1]) + "\n")  # the table itself
    assert "prepare" in changed_stages(dest, env)


def test_settings_errors_stop_dvc_repro_before_any_stage_works(shapes):
    dest, env = shapes
    before = {p: (dest / p).read_bytes() for p in PUBLISHED}
    set_params(dest, data={"skip_bad_imgs": True})
    out = sh(["dvc", "repro"], dest, env, ok=False)
    assert "unknown setting data.skip_bad_imgs; did you mean data.skip_bad_images?" in out
    params = load_params(dest / "params.yaml")
    del params["data"]["skip_bad_imgs"]
    params["evaluate"]["results_dir"] = "results"  # the project's own, not this dataset's
    (dest / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    out = sh(["dvc", "repro"], dest, env, ok=False)
    assert "evaluate.results_dir: results holds the results of dataset fashion-mnist-h" in out
    assert "Running stage 'prepare'" not in out
    assert {p: (dest / p).read_bytes() for p in PUBLISHED} == before
