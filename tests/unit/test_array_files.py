"""A damaged .npy or .npz file is one error naming the file, what it should hold and how to make
it again: never a traceback of numpy's or zipfile's, never numpy's advice to load it unsafely."""

from __future__ import annotations

import numpy as np
import pytest

from shdh.runtime.array_files import load_array, load_arrays
from shdh.steps.tree import load_tree


def _damaged(tmp_path):
    """A saved .npy and .npz, each cut short, emptied and with a garbled header."""
    npy, npz = tmp_path / "a.npy", tmp_path / "b.npz"
    np.save(npy, np.arange(1000))
    np.savez(npz, x=np.arange(1000), y=np.ones(3))
    cases = {}
    for path in (npy, npz):
        whole = path.read_bytes()
        for kind, data in (
            ("cut", whole[: len(whole) // 2]),
            ("empty", b""),
            ("garbled", b"\0" * 40 + whole[40:]),
        ):
            damaged = tmp_path / f"{kind}-{path.name}"
            damaged.write_bytes(data)
            cases[f"{kind} {path.suffix}"] = damaged
    return npy, npz, cases


def test_every_damage_is_one_error_that_names_the_file_and_the_remedy(tmp_path):
    npy, npz, cases = _damaged(tmp_path)
    assert load_array(npy, "the numbers", "remake it").tolist() == list(range(1000))
    assert set(load_arrays(npz, "the numbers", "remake it")) == {"x", "y"}
    for case, path in cases.items():
        read = load_array if path.suffix == ".npy" else load_arrays
        with pytest.raises(ValueError) as refused:
            read(path, "the numbers", "rerun `shdh tree`")
        message = str(refused.value)
        assert message.startswith(f"{path}: cannot read the numbers: "), case
        assert message.endswith("; rerun `shdh tree`") and "pickle" not in message, case


def test_an_archive_and_a_single_array_are_not_taken_for_each_other(tmp_path):
    npy, npz, _ = _damaged(tmp_path)
    with pytest.raises(ValueError, match=r"an \.npz archive, not an \.npy file; remake it"):
        load_array(npz, "the numbers", "remake it")
    with pytest.raises(ValueError, match=r"an \.npy file, not an \.npz archive; remake it"):
        load_arrays(npy, "the numbers", "remake it")


def test_a_step_reading_an_emptied_ancestor_matrix_says_which_and_what_to_rerun(tmp_path):
    from shdh.core.hierarchy import LabelTree
    from shdh.steps.tree import ANCESTORS_FILE, TREE_FILE

    LabelTree.from_paths(["a/b", "a/c"], root="r").save(tmp_path / TREE_FILE)
    (tmp_path / ANCESTORS_FILE).write_bytes(b"")
    with pytest.raises(ValueError, match=r"ancestors.npy: cannot read the ancestor matrix: dam"):
        load_tree(tmp_path)
