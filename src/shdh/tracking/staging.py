"""Folders moved through the object store, and a fit's inputs staged there once by their content.

The processes of a TrainJob meet the step that launched it only in the store. Their inputs are
the run's prepared dataset and S-matrix, the same for every fit of the run (methods x code
lengths x seeds), each of which is a TrainJob of its own. So an input is staged under the digest
of its content, SHDH_CHECKPOINT_URL/inputs/KIND-DIGEST/: the first fit that needs it uploads it
and every other finds it there, in this run and in later runs of the same data, so a million
photos cross the network once, not once per fit. `complete.json`, written after the last file,
marks a staged input whole: a launch killed halfway leaves an input that the next launch
uploads again, never one a node would read half of.

The digest covers every file's path and content. A shard's content is taken from the SHA-256
its dataset's meta.json records (prepare hashed each shard as it wrote it), so staging a
sharded dataset reads only its small files; every other file is hashed.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Any

from shdh.data.download import sha256sum
from shdh.runtime.atomic import atomic_dir
from shdh.tracking.checkpoint_sync import CheckpointStoreError, StoreFolder

log = logging.getLogger(__name__)

INPUTS_DIR = "inputs"
COMPLETE = "complete.json"
FILES = "files"
DIGEST_CHARS = 32  # 128 bits of SHA-256: distinct inputs never share a folder


def put_tree(folder: StoreFolder, local: Path, name: str) -> str:
    """Upload a folder's files as NAME/RELATIVE_PATH (a single file as NAME/FILE_NAME) under a
    store folder; returns where the local path is there (NAME, or NAME/FILE_NAME)."""
    local = Path(local)
    for relative, path in _files(local):
        folder.put_file(path, f"{name}/{relative}")
    return name if local.is_dir() else f"{name}/{local.name}"


def get_tree(folder: StoreFolder, name: str, dest: Path) -> Path:
    """Download every object under NAME/ of a store folder into the folder dest, which appears
    whole (a temporary name, then a rename) or not at all."""
    relatives = folder.listing(name)
    if not relatives:
        raise CheckpointStoreError(f"{folder.object_url(name)}/: nothing there")
    with atomic_dir(dest) as tmp:
        for relative in relatives:  # the store's own download: its errors name the object
            folder.download(f"{name}/{relative}", Path(tmp, relative))
    return Path(dest)


def content_digest(local: Path) -> str:
    """SHA-256 over the relative path and the content digest of every file of `local` (a folder
    or one file), shards by the digest their meta.json records."""
    local = Path(local)
    recorded = _recorded_shards(local) if local.is_dir() else {}
    total = hashlib.sha256()
    for relative, path in _files(local):
        total.update(f"{relative}\0{recorded.get(relative) or sha256sum(path)}\n".encode())
    return total.hexdigest()


def stage(root_url: str, local: Path, kind: str, *, client: Any = None) -> dict[str, str]:
    """Put `local` under root_url/inputs/KIND-DIGEST/ unless it is there whole already; returns
    where a node finds it ({"url": the folder of its files, "file": its name for a single file,
    else ""}), the form `fetch` takes."""
    local = Path(local)
    digest = content_digest(local)[:DIGEST_CHARS]
    folder = StoreFolder(f"{root_url.rstrip('/')}/{INPUTS_DIR}/{kind}-{digest}", client=client)
    expected = {relative: path.stat().st_size for relative, path in _files(local)}
    # complete.json is written last, and trusted only with every file there at its size: a
    # lifecycle rule or a person may have removed some since.
    if folder.listing(FILES) == expected and folder.head(COMPLETE):
        log.info("%s: staged already at %s, not uploaded again", local, folder.url)
    else:
        put_tree(folder, local, FILES)
        marker = {"digest": digest, "files": len(expected), "bytes": sum(expected.values())}
        folder.put_bytes(json.dumps(marker, indent=2).encode() + b"\n", COMPLETE)
        mib = marker["bytes"] / 2**20
        log.info("staged %s at %s (%d files, %.1f MiB)", local, folder.url, len(expected), mib)
    return {"url": f"{folder.url}/{FILES}", "file": "" if local.is_dir() else local.name}


def fetch(staged: dict[str, str], dest: Path) -> Path:
    """A staged input (what `stage` returned) as a local path under dest."""
    folder_url, name = staged["url"].rsplit("/", 1)
    local = get_tree(StoreFolder(folder_url), name, dest)
    return local / staged["file"] if staged["file"] else local


def _files(local: Path) -> list[tuple[str, Path]]:
    """(relative posix path, path) of each file, sorted; a single file by its name."""
    if not local.is_dir():
        return [(local.name, local)]
    paths = sorted(p for p in local.rglob("*") if p.is_file())
    return [(p.relative_to(local).as_posix(), p) for p in paths]


def _recorded_shards(local: Path) -> dict[str, str]:
    """{relative path: SHA-256} of the shards each dataset's meta.json under `local` lists.
    A meta.json that cannot be read records nothing: its files are hashed instead."""
    recorded = {}
    for meta_path in local.rglob("meta.json"):
        try:
            shards = json.loads(meta_path.read_text()).get("shards") or []
            for entry in shards:
                shard = (meta_path.parent / entry["file"]).relative_to(local).as_posix()
                recorded[shard] = str(entry["sha256"])
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            continue
    return recorded
