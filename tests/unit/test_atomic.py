"""Outputs appear whole under their final name, or not at all."""

from __future__ import annotations

import errno

import pytest

from shdh.runtime.atomic import (
    WriteError,
    atomic_dir,
    atomic_path,
    atomic_write_text,
    check_output_folder,
    check_writable,
)
from tests.readonly import read_only, run_without_override


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


def test_a_full_disk_names_the_output_being_written(tmp_path):
    target = tmp_path / "metrics.json"
    with pytest.raises(WriteError) as err, atomic_path(target):
        with open("/dev/full", "w") as full:  # every write fails with ENOSPC, naming no file
            full.write("x")
            full.flush()
    assert str(err.value) == f"{target}: cannot write: No space left on device"
    assert err.value.errno == errno.ENOSPC and isinstance(err.value, OSError)
    with pytest.raises(WriteError, match=f"^{tmp_path / 'ds'}: cannot write: No space"):
        with atomic_dir(tmp_path / "ds"), open("/dev/full", "w") as full:
            full.write("x")
            full.flush()
    assert sorted(p.name for p in tmp_path.iterdir()) == []


def test_an_input_that_cannot_be_read_is_not_called_a_write_error(tmp_path):
    with pytest.raises(FileNotFoundError) as err, atomic_dir(tmp_path / "out"):
        (tmp_path / "missing.txt").read_text()
    assert not isinstance(err.value, WriteError)


def test_check_writable_names_a_file_in_the_way(tmp_path):
    (tmp_path / "results").write_text("a file, not a folder")
    with pytest.raises(WriteError, match=r"^evaluate.results_dir: .*results: not a folder"):
        check_writable(tmp_path / "results" / "run" / "metrics.json", "evaluate.results_dir")
    check_writable(tmp_path / "new" / "deeper" / "x.npy")  # created later, below tmp_path
    assert not (tmp_path / "new").exists()


def test_a_read_only_folder_fails_the_check_and_the_write_naming_it(tmp_path):
    folder = read_only(tmp_path / "ro")
    script = (
        "import sys\n"
        "from shdh.runtime.atomic import atomic_write_text, check_writable\n"
        "for call in (lambda: check_writable(sys.argv[1] + '/m.json', 'evaluate.results_dir'),\n"
        "             lambda: atomic_write_text(sys.argv[1] + '/m.json', 'x')):\n"
        "    try:\n"
        "        call()\n"
        "    except OSError as exc:\n"
        "        print(type(exc).__name__, exc)\n"
    )
    out = run_without_override(["-c", script, str(folder)]).stdout.splitlines()
    assert out == [
        f"WriteError evaluate.results_dir: {folder}: cannot write there (Permission denied); "
        "make it writable or choose another folder",
        f"WriteError {folder}/m.json: cannot write: Permission denied",
    ]


def test_an_output_folder_replaces_only_an_earlier_output_of_its_step(tmp_path):
    earlier = tmp_path / "earlier"
    earlier.mkdir()
    (earlier / "tree.json").write_text("{}")
    (tmp_path / "empty").mkdir()
    for fine in (earlier, tmp_path / "empty", tmp_path / "new"):
        check_output_folder(fine, "tree.out_dir", "tree.json")
    raw = tmp_path / "raw"
    raw.mkdir()
    for name in ("a.gz", "b.gz", "c.gz", "d.gz"):
        (raw / name).write_bytes(b"data")
    with pytest.raises(WriteError) as refused:
        check_output_folder(raw, "tree.out_dir", "tree.json")
    assert str(refused.value) == (
        f"tree.out_dir: {raw} holds other files (a.gz, b.gz, c.gz, ...) and no tree.json, so it "
        "is not an earlier output of this step, and writing there would delete them; choose a "
        "new or empty folder"
    )
    (tmp_path / "gist.npy").write_bytes(b"x")
    with pytest.raises(WriteError, match=r"gist.npy is a file; this step writes a folder there"):
        check_output_folder(tmp_path / "gist.npy", "tree.out_dir", "tree.json")
