"""A fitted model's codes for a set of items, kept between runs of the score and index steps
under a digest of what decides them.

DVC reruns the whole evaluate stage when any fit changes, and its score cache
(shdh.steps.score_cache) spares the ranking of unchanged codes, but not the encoding that comes
first: six CNN-F encoders over 70,000 images are 40 of the 68 s of an evaluate in which nothing
changed, on 2 cores, and a million photos through ResNet-50 are hours per encoder. A baseline's
new setting, a report edit or a new alpha sweep would encode everything again. Codes are a pure
function of the model, its inputs, the encoding code and the maths settings, so they are kept
under a SHA-256 of exactly those:

- the model: its method, its parameters (less where it keeps its files, LOCATION_PARAMS) and
  every learned array, so that a refit with other weights never reads the old codes;
- the inputs: the input's content (the array's bytes, or a sharded dataset's listed shard
  digests and sizes) and the rows encoded (RowKeys);
- the encoding code: the source fingerprint of the hasher's module, of this module and of the
  split's inputs (the shard reader, the bit packing), with every shdh module they import
  (shdh.runtime.source_fingerprint);
- the maths settings: the CPU pin and architecture, the library versions, the CPUs and thread
  settings, and a network's device, because a float sum computed otherwise may flip a near-zero
  sign.

The index step encodes the database with the registered champion, a copy of one of the score
step's models: the same key, so it reads the codes evaluate stored. The entries live in the
user's cache (shdh.runtime.user_cache: ~/.cache/shdh/codes, or $SHDH_CACHE_DIR/codes); an
entry is packed bits, 8 bytes an item at 64 bits. SHDH_CODES_CACHE=0 turns it off.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from shdh.data.shards import LocalShards, ShardedImages
from shdh.hashers.base import Hasher
from shdh.ranking.exact import pack_codes, unpack_codes
from shdh.runtime import instruction_set, user_cache
from shdh.runtime.cpu_quota import available_cpus
from shdh.runtime.json_files import read_json_object
from shdh.runtime.source_fingerprint import fingerprint

# Bumped when an entry's layout or the key's makeup changes, so that no old entry is read.
FORMAT = "shdh-codes/1"
SWITCH = "SHDH_CODES_CACHE"
WHAT = "a codes-cache entry"
# Parameters that say where a fit keeps its files, not what it computes (a deep method's
# checkpoints): a registered copy of a fit differs from it there alone.
LOCATION_PARAMS = ("work_dir",)
# The variables that set how many threads numpy's BLAS and torch compute with.
THREAD_SETTINGS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
# The code between an input and a hasher's encode, and the entries' own packing: with the
# hasher's module (and everything of shdh each imports: the shard reader, the bit packing), the
# source whose edit must encode afresh.
ENCODING_CODE = (__name__, "shdh.steps.split_inputs")
# Bytes of an input hashed at a time: a memory-mapped input is read once, in pieces.
DIGEST_BYTES = 64 * 2**20


def cache_dir() -> Path | None:
    """The folder of entries, or None when SHDH_CODES_CACHE=0 turns the cache off."""
    return user_cache.cache_dir("codes", SWITCH)


def model_digest(hasher: Hasher) -> str:
    """SHA-256 of the method, its parameters (not where it keeps its files) and its learned
    arrays (name, dtype, shape and bytes of each). A settings object (a deep method's loop and
    objective) enters as its repr, which names every field."""
    params = {k: v for k, v in hasher.get_params().items() if k not in LOCATION_PARAMS}
    digest = hashlib.sha256(
        json.dumps([hasher.name, params], sort_keys=True, default=repr).encode()
    )
    for name, array in sorted(hasher.state().items()):
        array = np.ascontiguousarray(array)
        digest.update(f"\n{name} {array.dtype.str} {array.shape}\n".encode())
        digest.update(array.data)
    return digest.hexdigest()


def maths_settings(hasher: Hasher) -> dict[str, Any]:
    """What decides encode's bits besides the model and its inputs: the CPU pin, numpy's version
    and the threads its matrix products may use, and for a network (a deep hasher's `loop`)
    torch's version, the device it encodes on and its thread count."""
    settings = {
        **instruction_set.describe(),
        "machine": platform.machine(),
        "numpy": np.__version__,
        "cpus": available_cpus(),
        **{name: os.environ.get(name) for name in THREAD_SETTINGS},
    }
    loop = getattr(hasher, "loop", None)
    if loop is not None:
        import torch

        from shdh.runtime.devices import resolve_device

        device = resolve_device(loop.device)
        name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
        threads = loop.num_threads or torch.get_num_threads()
        versions = {"torch": torch.__version__, "torchvision": _version("torchvision")}
        settings |= {**versions, "device": name, "threads": threads}
    return settings


def model_key(hasher: Hasher) -> str:
    """The SHA-256 of the model, the encoding code and the maths settings: what every entry of
    one model shares, computed once for all the rows it encodes."""
    header = {
        "model": model_digest(hasher),
        "code": fingerprint([type(hasher).__module__, *ENCODING_CODE]),
        "maths": maths_settings(hasher),
    }
    return hashlib.sha256(json.dumps(header, sort_keys=True).encode()).hexdigest()


def entry_key(hasher: Hasher, rows_key: str, model: str | None = None) -> str:
    """The SHA-256 of the format, the model's key (model_key, given or computed) and the rows
    encoded (RowKeys)."""
    model = model_key(hasher) if model is None else model
    return hashlib.sha256(f"{FORMAT}\n{model}\n{rows_key}".encode()).hexdigest()


class RowKeys:
    """The keys of what a method encodes: some rows of one of a split's inputs. Each input's
    content is hashed once, on first use."""

    def __init__(self, inputs: dict[str, Any]) -> None:
        self.inputs = inputs
        self.digests: dict[str, str | None] = {}

    def __call__(self, kind: str, rows: np.ndarray) -> str | None:
        """A SHA-256 of the input's content and these row numbers; None for an input whose
        content has no digest, and with the cache off, when no input is hashed for nothing."""
        if cache_dir() is None:
            return None
        if kind not in self.digests:
            self.digests[kind] = content_digest(self.inputs[kind])
        if self.digests[kind] is None:
            return None
        rows = np.ascontiguousarray(rows, dtype=np.int64)
        return hashlib.sha256(f"{self.digests[kind]} rows\n".encode() + rows.data).hexdigest()


def content_digest(X: Any) -> str | None:
    """A SHA-256 of an input's dtype, shape and values: read in pieces from an array (memory-
    mapped images or features); from the shard digests of sharded images, as meta.json lists
    them (the writer's) or as their download verified them (S3), so no shard is read; None for
    an input that offers neither."""
    if isinstance(X, ShardedImages):
        digests = _shard_digests(X.source)
        return None if digests is None else _digest_of([list(X.shape), digests])
    if not isinstance(X, np.ndarray):
        return None
    h = hashlib.sha256(f"{X.dtype.str} {X.shape}\n".encode())
    step = max(1, DIGEST_BYTES // max(1, X[:1].nbytes))
    for start in range(0, len(X), step):
        h.update(np.ascontiguousarray(X[start : start + step]).data)
    return h.hexdigest()


def _shard_digests(source: Any) -> list[str] | None:
    """Each shard's SHA-256: a download's, which was verified; a local shard's as meta.json lists
    it (its writer's, not checked when read), with the file's size, so that a shard cut short
    or left out of a partial restore never passes for the one listed."""
    if isinstance(source, LocalShards):
        meta = read_json_object(source.root / "meta.json", "the dataset's record")
        listed = {entry.get("file"): entry.get("sha256") for entry in meta.get("shards", [])}
        digests = [listed.get(name) for name in source.files]
        if all(isinstance(d, str) for d in digests):
            sizes = [source.path(i).stat().st_size for i in range(len(source.files))]
            digests = [f"{d} {size}" for d, size in zip(digests, sizes, strict=True)]
    else:
        digests = list(getattr(source, "digests", None) or [None])
    return digests if all(isinstance(d, str) for d in digests) else None


def _version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _digest_of(value: Any) -> str:
    return hashlib.sha256(json.dumps(value).encode()).hexdigest()


def cached_encode(hasher: Hasher, X: Any, rows_key: str | None) -> tuple[np.ndarray, float, bool]:
    """hasher.encode(X)'s {-1, +1} codes, the seconds encoding took, and whether they were read
    from the cache (the seconds then are those of the run that stored them). rows_key: the
    key of X's rows (RowKeys); None encodes uncached."""
    [found] = cached_encodes(hasher, [(X, rows_key)])
    return found


def cached_encodes(
    hasher: Hasher, parts: list[tuple[Any, str | None]]
) -> list[tuple[np.ndarray, float, bool]]:
    """cached_encode for several inputs of one model (a split's queries and database): the
    model's key, which hashes every weight, is computed once, and only if some part has a key."""
    folder = cache_dir()
    model = model_key(hasher) if folder is not None and any(k for _, k in parts) else None
    out = []
    for X, rows_key in parts:
        path = None
        if model is not None and rows_key is not None:
            path = folder / f"{entry_key(hasher, rows_key, model)}.npz"
        out.append(_encoded(hasher, X, path))
    return out


def _encoded(hasher: Hasher, X: Any, path: Path | None) -> tuple[np.ndarray, float, bool]:
    found = None if path is None else _read(path, len(X), hasher.n_bits)
    if found is not None:
        return *found, True
    start = time.perf_counter()
    codes = hasher.encode(X)
    seconds = time.perf_counter() - start
    if path is not None:
        arrays = {"packed": pack_codes(codes), "n_bits": np.int64(codes.shape[1])}
        user_cache.write_entry(path, {**arrays, "seconds": np.float64(seconds)}, SWITCH)
    return codes, seconds, False


def _read(path: Path, n_items: int, n_bits: int) -> tuple[np.ndarray, float] | None:
    """An entry's codes and seconds; None where there is none or it is not what the key says."""
    arrays = user_cache.read_entry(path, WHAT)
    if arrays is None:
        return None
    try:
        codes = unpack_codes(arrays["packed"], int(arrays["n_bits"]))
        if codes.shape != (n_items, n_bits):
            raise ValueError(f"codes of shape {codes.shape}, expected {(n_items, n_bits)}")
        return codes, float(arrays["seconds"])
    except (ValueError, KeyError, TypeError) as err:
        user_cache.damaged(path, WHAT, err)
        return None
