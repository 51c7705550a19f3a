"""Folders moved through the object store, and a fit's inputs staged there once by their content.

The processes of a TrainJob meet the step that launched it only in the store. Their inputs are
the run's prepared dataset and S-matrix, the same for every fit of the run (methods x code
lengths x seeds), each of which is a TrainJob of its own. So an input is staged under the digest
of its content, SHDH_CHECKPOINT_URL/inputs/KIND-DIGEST/: the first fit that needs it uploads it
and every other finds it there, in this run and in later runs of the same data, so a million
photos cross the network once, not once per fit. `complete.json`, written after the last file,
marks a staged input whole: a launch killed halfway leaves an input that the next launch
uploads again, never one a node would read half of. Fits that launch at once (a DAG starts them
side by side) settle which of them uploads through a claim in the store (Lease); the others
wait for its complete.json.

The digest covers every file's path and content. A shard's content is taken from the SHA-256
its dataset's meta.json records (prepare hashed each shard as it wrote it), so staging a
sharded dataset reads only its small files; every other file is hashed.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
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
LEASE = "lease.json"  # which launch is uploading the input now (Lease)
LEASE_STALE_S = 120.0  # a claim not refreshed for this long is a dead launch's
LEASE_REFRESH_S = 30.0  # how often the uploading launch refreshes its claim
SETTLE_S = 2.0  # between writing a claim and reading back whose it is
POLL_S = 5.0  # how often a waiting launch looks for complete.json
NODE_CACHE = "shdh-inputs"  # a node's copies of staged inputs, under its temporary folder


def put_tree(
    folder: StoreFolder, local: Path, name: str, after_each: Callable[[], None] | None = None
) -> str:
    """Upload a folder's files as NAME/RELATIVE_PATH (a single file as NAME/FILE_NAME) under a
    store folder, calling after_each after each file; returns where the local path is there
    (NAME, or NAME/FILE_NAME)."""
    local = Path(local)
    for relative, path in _files(local):
        folder.put_file(path, f"{name}/{relative}")
        if after_each is not None:
            after_each()
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
    """Put `local` under root_url/inputs/KIND-DIGEST/ unless it is there whole already, or wait
    while another launch of the run puts it there; returns where a node finds it ({"url": the
    folder of its files, "file": its name for a single file, else ""}), the form `fetch` takes."""
    local = Path(local)
    digest = content_digest(local)[:DIGEST_CHARS]
    folder = StoreFolder(f"{root_url.rstrip('/')}/{INPUTS_DIR}/{kind}-{digest}", client=client)
    expected = {relative: path.stat().st_size for relative, path in _files(local)}
    located = {"url": f"{folder.url}/{FILES}", "file": "" if local.is_dir() else local.name}
    lease, waited = Lease(folder), 0.0
    while not _whole(folder, expected):
        if lease.claim():
            try:
                if not _whole(folder, expected):  # unless its last holder finished meanwhile
                    _upload(folder, local, digest, lease, expected)
                    return located
            finally:
                lease.release()
            continue
        if waited % 60 < POLL_S:
            log.info("%s: another launch is staging it at %s; waiting for it", local, folder.url)
        time.sleep(POLL_S)
        waited += POLL_S
    log.info("%s: staged already at %s, not uploaded again", local, folder.url)
    return located


def _upload(
    folder: StoreFolder, local: Path, digest: str, lease: Lease, sizes: dict[str, int]
) -> None:
    """Every file (`sizes`: their sizes), the claim refreshed as they go, then complete.json."""
    put_tree(folder, local, FILES, lease.refresh)
    folder.put_bytes(json.dumps({"digest": digest, "files": len(sizes)}).encode() + b"\n", COMPLETE)
    log.info("staged %s at %s (%.1f MiB)", local, folder.url, sum(sizes.values()) / 2**20)


def _whole(folder: StoreFolder, expected: dict[str, int]) -> bool:
    """complete.json is written last, and trusted only with every file there at its size: a
    lifecycle rule or a person may have removed some since."""
    return folder.listing(FILES) == expected and folder.head(COMPLETE) is not None


@dataclass
class Lease:
    """Which launch uploads an input when several fits of a run launch at once (a DAG starts
    its fits side by side). The store has no atomic create, so a launch writes its claim, lets
    it settle, and reads back whose it is: of launches that claim together the last writer wins
    and every one of them reads the same winner; the others wait for its complete.json. The
    holder refreshes its claim while it uploads, so a claim left unrefreshed for LEASE_STALE_S
    (by the store's clock) is a dead launch's, and the next launch takes it over."""

    folder: StoreFolder
    owner: str = field(default_factory=lambda: uuid.uuid4().hex)
    written: float = 0.0  # time.monotonic() of this launch's last write of its claim

    def claim(self) -> bool:
        holder = self.holder()
        if holder is not None and holder[0] != self.owner and holder[1] < LEASE_STALE_S:
            return False
        self._write()
        time.sleep(SETTLE_S)
        holder = self.holder()
        return holder is not None and holder[0] == self.owner

    def holder(self) -> tuple[str, float] | None:
        """(owner, seconds since the claim was written) of the current claim, or None."""
        answer = self.folder.read(LEASE)
        if answer is None:
            return None
        body, response = answer
        headers = response.get("ResponseMetadata", {}).get("HTTPHeaders", {})
        now = parsedate_to_datetime(headers["date"]) if "date" in headers else None
        age = ((now or datetime.now(UTC)) - response["LastModified"]).total_seconds()
        try:
            return str(json.loads(body)["owner"]), age
        except (ValueError, KeyError, TypeError):
            return "", age  # unreadable: anyone's once stale

    def refresh(self) -> None:
        if time.monotonic() - self.written >= LEASE_REFRESH_S:
            self._write()

    def release(self) -> None:
        holder = self.holder()
        if holder is not None and holder[0] == self.owner:
            self.folder.delete(LEASE)

    def _write(self) -> None:
        self.folder.put_bytes(json.dumps({"owner": self.owner}).encode(), LEASE)
        self.written = time.monotonic()


def fetch(staged: dict[str, str], cache: Path | None = None) -> Path:
    """A staged input (what `stage` returned) as a local path in `cache` (default: the
    temporary folder's shdh-inputs/). The processes of a node (torchrun starts one per GPU in
    the same container) share one copy: the first downloads it under a lock while the others
    wait, then all read it. A staged input never changes (its folder is named by its content),
    so the copy is kept for the node's next job."""
    folder_url, name = staged["url"].rsplit("/", 1)
    cache = Path(cache) if cache is not None else Path(tempfile.gettempdir()) / NODE_CACHE
    key = folder_url.rsplit("/", 1)[1]  # KIND-DIGEST
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / f"{key}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (cache / key).is_dir():  # get_tree renames a whole copy into place, or none
            get_tree(StoreFolder(folder_url), name, cache / key)
    return cache / key / staged["file"] if staged["file"] else cache / key


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
