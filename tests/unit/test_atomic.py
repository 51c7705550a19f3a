"""Outputs appear whole under their final name, or not at all."""

from __future__ import annotations

import pytest

from shdh.atomic import atomic_dir, atomic_path, atomic_write_text


def test_atomic_path_moves_only_on_success(tmp_path):
    target = tmp_path / "sub" / "out.bin"
    with atomic_path(target) as tmp:
        assert tmp.parent == target.parent and not tmp.exists()
        tmp.write_bytes(b"new")
    assert target.read_bytes() == b"new"
    with pytest.raises(RuntimeError), atomic_path(target) as tmp:
        tmp.write_bytes(b"half")
        raise RuntimeError("boom")
    assert target.read_bytes() == b"new"
    assert sorted(p.name for p in target.parent.iterdir()) == ["out.bin"]


def test_atomic_path_keeps_a_suffix_for_picky_writers(tmp_path):
    with atomic_path(tmp_path / "a.npz", suffix=".npz") as tmp:
        assert tmp.name.endswith(".npz")
        tmp.write_bytes(b"x")
    assert (tmp_path / "a.npz").read_bytes() == b"x"


def test_atomic_dir_replaces_whole_directory_or_keeps_the_old(tmp_path):
    target = tmp_path / "out"
    with atomic_dir(target) as tmp:
        (tmp / "a").write_text("1")
    with pytest.raises(ValueError), atomic_dir(target) as tmp:
        (tmp / "b").write_text("2")
        raise ValueError("bad input")
    assert [p.name for p in target.iterdir()] == ["a"]
    with atomic_dir(target) as tmp:
        (tmp / "c").write_text("3")
    assert [p.name for p in target.iterdir()] == ["c"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_atomic_write_text(tmp_path):
    atomic_write_text(tmp_path / "x.txt", "hello")
    assert (tmp_path / "x.txt").read_text() == "hello"
