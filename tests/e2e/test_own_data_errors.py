"""Bad own data under `dvc repro`, in a fresh copy of the repository.

DVC deletes a stage's outputs before it runs the stage, so an error found by `prepare` costs
the last good prepared data. The inputs stage, which DVC runs first, names what it can find
without decoding an image (a misspelt data.raw_dir, a label on an inner node) with nothing
deleted; an undecodable image is found only by decoding, and then `dvc checkout prepare` puts
the last good prepared data back from DVC's cache.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from shdh.data.folder import make_shapes_folder
from tests.e2e.clone import clone_repo, sh
from tests.e2e.test_own_data import set_params

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """The clone with shapes/ (12 leaves, 3 PNGs each) on the smoke profile, prepared once."""
    dest = tmp_path_factory.mktemp("own-errors") / "shdh"
    env = clone_repo(dest)
    make_shapes_folder(dest / "shapes", n_per_leaf=3)
    set_params(dest, data={"dataset": "folder", "raw_dir": "shapes"})
    sh(["shdh", "profile", "apply", "smoke"], dest, env)
    set_params(dest, data={"max_items": None})
    sh(["dvc", "repro", "prepare"], dest, env)
    return dest, env


def prepared(dest: Path) -> dict[str, bytes]:
    folder = dest / "artifacts" / "prepared"
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_a_misspelt_raw_dir_stops_dvc_repro_at_the_inputs_stage(repo):
    dest, env = repo
    before = prepared(dest)
    set_params(dest, data={"raw_dir": "shapez"})
    out = sh(["dvc", "repro"], dest, env, ok=False)
    set_params(dest, data={"raw_dir": "shapes"})
    assert "params.yaml: data.raw_dir: shapez does not exist (data.dataset: folder" in out
    assert "would overwrite them" not in out and "Running stage 'prepare'" not in out
    assert prepared(dest) == before


def test_an_image_at_an_inner_node_stops_dvc_repro_with_nothing_deleted(repo):
    dest, env = repo
    before = prepared(dest)
    stray = dest / "shapes" / "warm" / "red" / "x.png"
    Image.fromarray(np.zeros((16, 16, 3), dtype=np.uint8)).save(stray)
    out = sh(["dvc", "repro"], dest, env, ok=False)
    stray.unlink()
    assert f"{Path('shapes/warm/red/x.png')}: label 'warm/red' is an inner node" in out
    assert "Running stage 'prepare'" not in out
    assert prepared(dest) == before


def test_dvc_checkout_prepare_restores_what_a_failed_conversion_deleted(repo):
    dest, env = repo
    before = prepared(dest)
    for image in ("warm/red/circle/circle_001.png", "cool/blue/square/square_002.png"):
        (dest / "shapes" / image).write_bytes(b"not a png")
    out = sh(["dvc", "repro", "prepare"], dest, env, ok=False)
    assert "2 of 36 image files cannot be decoded" in out
    assert "circle_001.png: cannot decode image" in out
    assert "square_002.png: cannot decode image" in out
    assert not (dest / "artifacts" / "prepared").exists()  # DVC removed it before the stage
    sh(["dvc", "checkout", "prepare"], dest, env)
    assert prepared(dest) == before
