"""Safe extraction of downloaded archives (tar, zip, and RAR through an external tool).

An archive from a mirror is untrusted input: a member named ``/etc/x`` or ``../../x``, or a
symbolic link followed by a file written "through" it, would let it write outside the folder it
is unpacked into. Every member name is therefore checked before anything is written, links and
device files are refused, and the error names the archive and the member. tarfile's ``data``
filter is applied as well, as a second line of defence.

The archive is unpacked into a temporary sibling folder that is renamed into place only after the
whole archive (and an optional caller check, such as per-file md5s) succeeded, so a truncated or
tampered archive never leaves a half-extracted folder under the final name.
"""

from __future__ import annotations

import gzip
import logging
import lzma
import os
import shutil
import stat
import subprocess
import tarfile
import zipfile
import zlib
from collections.abc import Callable, Iterable
from pathlib import Path, PurePosixPath

from shdh.data.download import md5sum
from shdh.data.idx import DataFormatError
from shdh.runtime.atomic import atomic_dir

log = logging.getLogger(__name__)

_CHUNK = 1 << 20
# What a truncated or damaged archive raises while it is read (other OSErrors, such as a full
# disk, are not the archive's fault and pass through unchanged).
_CORRUPT = (
    tarfile.TarError,
    zipfile.BadZipFile,
    EOFError,
    zlib.error,
    gzip.BadGzipFile,
    lzma.LZMAError,
)
# External programs that can unpack (multi-volume) RAR archives, in order of preference.
RAR_TOOLS = ("unrar", "7zz", "7z", "7za")


class UnsafeArchiveError(DataFormatError):
    """An archive member would be written outside the target folder, or is a link or device."""


def check_member_name(name: str, archive: str | os.PathLike[str]) -> tuple[str, ...]:
    """Return the path components of a safe relative member name, or raise naming the member.

    Backslashes count as separators too: a zip made on Windows may use them, and a name that is
    harmless on Linux must not turn into ``..\\..\\x`` elsewhere.
    """
    if not name or "\x00" in name:
        raise UnsafeArchiveError(f"{archive}: member {name!r}: empty name or NUL character")
    unified = name.replace("\\", "/")
    if unified.startswith("/") or (len(unified) >= 2 and unified[1] == ":"):
        raise UnsafeArchiveError(f"{archive}: member {name!r}: absolute path")
    parts = PurePosixPath(unified).parts
    if ".." in parts:
        raise UnsafeArchiveError(f"{archive}: member {name!r}: '..' in the path")
    parts = tuple(p for p in parts if p != ".")
    if not parts:
        raise UnsafeArchiveError(f"{archive}: member {name!r}: names no file")
    return parts


def _relative(name: str, archive: Path, root: str | None) -> tuple[str, ...] | None:
    """Checked member components with ``root`` removed; None for the ``root`` folder itself."""
    parts = check_member_name(name, archive)
    if root is None:
        return parts
    if parts[0] != root:
        raise DataFormatError(
            f"{archive}: member {name!r} lies outside the expected top folder {root!r}"
        )
    return parts[1:] or None


def _extract_tar(archive: Path, out: Path, root: str | None) -> int:
    count = 0
    with tarfile.open(archive, mode="r:*") as tf:
        for member in tf:  # streams the headers: a truncated archive fails here
            rel = _relative(member.name, archive, root)
            if not (member.isfile() or member.isdir()):
                kind = "link" if member.issym() or member.islnk() else "special file"
                raise UnsafeArchiveError(
                    f"{archive}: member {member.name!r}: {kind}s are not allowed"
                )
            if rel is None:
                continue
            tf.extract(member.replace(name="/".join(rel), deep=False), out, filter="data")
            count += member.isfile()
    return count


def _extract_zip(archive: Path, out: Path, root: str | None) -> int:
    count = 0
    with zipfile.ZipFile(archive) as zf:
        for info in zf.infolist():
            rel = _relative(info.filename, archive, root)
            kind = stat.S_IFMT(info.external_attr >> 16)  # Unix file type; 0 if not recorded
            if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
                raise UnsafeArchiveError(
                    f"{archive}: member {info.filename!r}: links and special files are not allowed"
                )
            if rel is None:
                continue
            target = out.joinpath(*rel)
            if info.is_dir():
                target.mkdir(parents=True, exist_ok=True)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            with zf.open(info) as src, open(target, "xb") as dst:
                shutil.copyfileobj(src, dst, _CHUNK)
            count += 1
    return count


def _archive_kind(archive: Path) -> str:
    if not archive.is_file():
        raise FileNotFoundError(f"{archive}: no such archive")
    if zipfile.is_zipfile(archive):
        return "zip"
    with open(archive, "rb") as f:
        head = f.read(8)
    if head.startswith(b"Rar!\x1a\x07"):
        return "rar"
    return "tar"  # plain or compressed; tarfile detects the compression from the content


def extract_archive(
    archive: str | os.PathLike[str],
    dest: str | os.PathLike[str],
    *,
    root: str | None = None,
    check: Callable[[Path], None] | None = None,
) -> Path:
    """Unpack a tar (any compression), zip or RAR archive into ``dest`` and return ``dest``.

    ``root``: the single top-level folder the archive must hold (e.g. ``cifar-100-python``);
    its contents become the contents of ``dest``, and a member outside it is an error.
    ``check(folder)`` runs on the complete temporary folder before it is renamed into place: an
    exception from it leaves ``dest`` as it was. An existing ``dest`` is replaced only on success.
    """
    archive, dest = Path(archive), Path(dest)
    kind = _archive_kind(archive)
    with atomic_dir(dest) as tmp:
        try:
            if kind == "zip":
                n_files = _extract_zip(archive, tmp, root)
            elif kind == "rar":
                n_files = _extract_rar(archive, tmp, root)
            else:
                n_files = _extract_tar(archive, tmp, root)
        except tarfile.FilterError as exc:  # the data filter caught what the checks did not
            raise UnsafeArchiveError(f"{archive}: {exc}") from exc
        except _CORRUPT as exc:
            raise DataFormatError(f"{archive}: truncated or corrupt archive: {exc}") from exc
        if check is not None:
            check(tmp)
    log.info("extracted %d files from %s into %s", n_files, archive, dest)
    return dest


# --------------------------------------------------------------------------------------------
# RAR: the Python standard library cannot read it, so an installed unrar or 7-Zip does the work
# --------------------------------------------------------------------------------------------


def find_rar_tool(which: Callable[[str], str | None] = shutil.which) -> str:
    """Path of the first installed RAR-capable program, or an error saying what to install."""
    for tool in RAR_TOOLS:
        path = which(tool)
        if path:
            return path
    raise RuntimeError(
        "extracting a RAR archive needs one of the programs "
        + ", ".join(RAR_TOOLS)
        + " on PATH (Debian: apt-get install unrar (non-free) or 7zip 7zip-rar)"
    )


def parse_rar_listing(tool: str, output: str, archive: str | os.PathLike[str]) -> list[str]:
    """Member names from ``unrar lb`` (one bare name a line) or ``7z l -ba -slt`` ("Path = x").

    7-Zip may print a block about the archive itself (its own "Path = <archive>") before a
    "----------" line; only the records after that line are members.
    """
    lines = output.splitlines()
    if Path(tool).name == "unrar":
        return [line for line in lines if line.strip()]
    if "----------" in lines:
        lines = lines[lines.index("----------") + 1 :]
    names = [line[len("Path = ") :] for line in lines if line.startswith("Path = ")]
    return [name for name in names if name != str(archive)]


def _run(cmd: list[str], archive: Path) -> str:
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        detail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise DataFormatError(
            f"{archive}: {Path(cmd[0]).name} failed (exit {result.returncode}): "
            + " / ".join(detail)
        )
    return result.stdout


def _reject_links(folder: Path, archive: Path) -> None:
    """After an external tool ran: every extracted entry must be a plain file or folder."""
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            mode = path.lstat().st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
                raise UnsafeArchiveError(
                    f"{archive}: member {path.relative_to(folder).as_posix()!r}: links and "
                    "special files are not allowed"
                )


def _move_contents(src: Path, dest: Path) -> None:
    for child in sorted(src.iterdir()):
        os.replace(child, dest / child.name)


def _extract_rar(archive: Path, out: Path, root: str | None) -> int:
    """List and check every member name first, then let the tool unpack the (first) volume.

    unrar and 7-Zip find the other volumes of a ``.partN.rar`` set beside the first one. Links
    cannot be recognised reliably in their listings, so the unpacked tree is checked afterwards
    and any link or special file fails the whole extraction.
    """
    tool = find_rar_tool()
    if Path(tool).name == "unrar":
        listing = _run([tool, "lb", "-v", str(archive)], archive)
    else:
        listing = _run([tool, "l", "-ba", "-slt", str(archive)], archive)
    names = parse_rar_listing(tool, listing, archive)
    if not names:
        raise DataFormatError(f"{archive}: the archive lists no members")
    for name in names:
        _relative(name, archive, root)
    scratch = out / ".unpack"
    scratch.mkdir()
    if Path(tool).name == "unrar":
        _run([tool, "x", "-y", "-idq", str(archive), str(scratch) + os.sep], archive)
    else:
        _run([tool, "x", "-y", f"-o{scratch}", str(archive)], archive)
    _reject_links(scratch, archive)
    _move_contents(scratch / root if root else scratch, out)
    shutil.rmtree(scratch)
    return sum(len(files) for _, _, files in os.walk(out))


def file_md5s_match(
    folder: Path, expected: Iterable[tuple[str, str]], *, where: str | None = None
) -> None:
    """Raise naming the file if any ``(relative name, md5)`` in ``expected`` differs or is missing.

    ``where`` is the folder name used in messages (the final name, not a temporary one).
    """
    shown = where or str(folder)
    for name, md5 in expected:
        path = folder / name
        if not path.is_file():
            raise DataFormatError(f"{shown}/{name}: missing from the archive")
        actual = md5sum(path)
        if actual != md5.lower():
            raise DataFormatError(
                f"{shown}/{name}: md5 mismatch: expected {md5.lower()}, got {actual}"
            )
