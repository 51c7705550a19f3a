"""extract_archive(): tar and zip unpacking, unsafe members, truncation, and atomic placement."""

import io
import tarfile
import zipfile

import pytest

from shdh.data.archive import (
    UnsafeArchiveError,
    check_member_name,
    extract_archive,
    file_md5s_match,
    find_rar_tool,
    parse_rar_listing,
)
from shdh.data.download import md5sum
from shdh.data.idx import DataFormatError

FILES = {"top/a.txt": b"alpha\n", "top/sub/b.bin": bytes(range(256)) * 40}


def _add_file(tf: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tf.addfile(info, io.BytesIO(data))


def write_tar(path, files=FILES, extra=None, mode="w:gz"):
    with tarfile.open(path, mode) as tf:
        folder = tarfile.TarInfo("top")
        folder.type = tarfile.DIRTYPE
        tf.addfile(folder)
        for name, data in files.items():
            _add_file(tf, name, data)
        if extra is not None:
            extra(tf)
    return path


def write_zip(path, files=FILES, extra=None):
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        if extra is not None:
            extra(zf)
    return path


def _siblings(folder):
    return sorted(p.name for p in folder.iterdir())


@pytest.mark.parametrize("writer", [write_tar, write_zip])
def test_extracts_under_root_and_strips_it(tmp_path, writer):
    archive = writer(tmp_path / "arch")
    dest = extract_archive(archive, tmp_path / "out", root="top")
    assert (dest / "a.txt").read_bytes() == FILES["top/a.txt"]
    assert (dest / "sub" / "b.bin").read_bytes() == FILES["top/sub/b.bin"]
    assert _siblings(tmp_path) == ["arch", "out"]  # no temporary folder left behind


def test_extracts_everything_without_root(tmp_path):
    archive = write_tar(tmp_path / "a.tar", mode="w")
    dest = extract_archive(archive, tmp_path / "out")
    assert (dest / "top" / "a.txt").read_bytes() == FILES["top/a.txt"]


@pytest.mark.parametrize(
    "name, problem",
    [
        ("/etc/evil", "absolute path"),
        ("top/../../evil", "'..'"),
        ("..\\evil", "'..'"),
        ("C:/evil", "absolute path"),
    ],
)
@pytest.mark.parametrize("writer", [write_tar, write_zip])
def test_unsafe_member_names_are_refused_by_name(tmp_path, writer, name, problem):
    if writer is write_tar:
        archive = write_tar(tmp_path / "arch", extra=lambda tf: _add_file(tf, name, b"x"))
    else:
        archive = write_zip(tmp_path / "arch", extra=lambda zf: zf.writestr(name, b"x"))
    with pytest.raises(UnsafeArchiveError, match=problem) as err:
        extract_archive(archive, tmp_path / "out", root=None)
    assert repr(name) in str(err.value) and str(archive) in str(err.value)
    assert _siblings(tmp_path) == ["arch"]
    assert not (tmp_path.parent / "evil").exists()


@pytest.mark.parametrize("kind", [tarfile.SYMTYPE, tarfile.LNKTYPE])
def test_tar_links_are_refused(tmp_path, kind):
    def add_link(tf):
        link = tarfile.TarInfo("top/link")
        link.type = kind
        link.linkname = "/etc/passwd" if kind == tarfile.SYMTYPE else "top/a.txt"
        tf.addfile(link)

    archive = write_tar(tmp_path / "arch", extra=add_link)
    with pytest.raises(UnsafeArchiveError, match="'top/link': links are not allowed"):
        extract_archive(archive, tmp_path / "out", root="top")
    assert _siblings(tmp_path) == ["arch"]


def test_zip_symlink_is_refused(tmp_path):
    def add_link(zf):
        info = zipfile.ZipInfo("top/link")
        info.external_attr = 0o120777 << 16  # S_IFLNK, as zip -y stores a link
        zf.writestr(info, "/etc/passwd")

    archive = write_zip(tmp_path / "arch", extra=add_link)
    with pytest.raises(UnsafeArchiveError, match="'top/link'"):
        extract_archive(archive, tmp_path / "out", root="top")
    assert _siblings(tmp_path) == ["arch"]


def test_member_outside_root_is_an_error(tmp_path):
    archive = write_tar(tmp_path / "arch", extra=lambda tf: _add_file(tf, "other/x", b"x"))
    with pytest.raises(DataFormatError, match="'other/x' lies outside the expected top folder"):
        extract_archive(archive, tmp_path / "out", root="top")


@pytest.mark.parametrize("writer", [write_tar, write_zip])
def test_truncated_archive_keeps_the_old_folder(tmp_path, writer):
    archive = writer(tmp_path / "arch")
    data = archive.read_bytes()
    archive.write_bytes(data[: len(data) // 2])
    old = tmp_path / "out"
    old.mkdir()
    (old / "previous.txt").write_text("kept")
    with pytest.raises(DataFormatError, match="truncated or corrupt archive"):
        extract_archive(archive, old, root="top")
    assert _siblings(old) == ["previous.txt"]
    assert _siblings(tmp_path) == ["arch", "out"]


def test_failing_check_leaves_nothing_under_the_final_name(tmp_path):
    archive = write_tar(tmp_path / "arch")
    seen = []

    def check(folder):
        seen.append(sorted(p.name for p in folder.iterdir()))
        raise DataFormatError("rejected by the caller")

    with pytest.raises(DataFormatError, match="rejected by the caller"):
        extract_archive(archive, tmp_path / "out", root="top", check=check)
    assert seen == [["a.txt", "sub"]]  # the check saw the complete extraction
    assert _siblings(tmp_path) == ["arch"]


def test_file_md5s_match_names_the_file(tmp_path):
    (tmp_path / "f").write_bytes(b"abc")
    file_md5s_match(tmp_path, [("f", md5sum(tmp_path / "f"))])
    with pytest.raises(DataFormatError, match="final/f: md5 mismatch"):
        file_md5s_match(tmp_path, [("f", "0" * 32)], where="final")
    with pytest.raises(DataFormatError, match="g: missing"):
        file_md5s_match(tmp_path, [("g", "0" * 32)])


def test_check_member_name_normalises_safe_names():
    assert check_member_name("./top/a.txt", "arch") == ("top", "a.txt")
    assert check_member_name("top\\sub\\b", "arch") == ("top", "sub", "b")
    with pytest.raises(UnsafeArchiveError, match="names no file"):
        check_member_name(".", "arch")
    with pytest.raises(UnsafeArchiveError, match="NUL"):
        check_member_name("a\x00b", "arch")


def test_rar_listings_are_parsed():
    unrar = "saiaprtc12ok/benchmark/wlist.txt\nsaiaprtc12ok/benchmark\n\n"
    assert parse_rar_listing("/usr/bin/unrar", unrar, "x.rar") == [
        "saiaprtc12ok/benchmark/wlist.txt",
        "saiaprtc12ok/benchmark",
    ]
    seven = (
        "Path = x.rar\nType = Rar\n\n----------\nPath = benchmark/wlist.txt\nSize = 10\n\n"
        "Path = ../evil\nSize = 1\n"
    )
    names = parse_rar_listing("/usr/bin/7z", seven, "x.rar")
    assert names == ["benchmark/wlist.txt", "../evil"]
    with pytest.raises(UnsafeArchiveError):
        check_member_name(names[1], "x.rar")


def test_missing_rar_tool_says_what_to_install():
    with pytest.raises(RuntimeError, match="unrar, 7zz, 7z, 7za"):
        find_rar_tool(which=lambda name: None)
    assert find_rar_tool(which=lambda name: f"/opt/{name}" if name == "7z" else None) == "/opt/7z"


def test_rar_archive_without_a_tool_is_a_clear_error(tmp_path, monkeypatch):
    archive = tmp_path / "x.part1.rar"
    archive.write_bytes(b"Rar!\x1a\x07\x01\x00" + b"\x00" * 32)  # RAR 5 signature
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    with pytest.raises(RuntimeError, match="needs one of the programs"):
        extract_archive(archive, tmp_path / "out")
    assert _siblings(tmp_path) == ["x.part1.rar"]
