"""The files a stage reads that dvc.yaml cannot list, as content hashes DVC can depend on.

dvc.yaml lists each stage's dependencies as paths, and a path from params.yaml only where the
setting is always a file or folder. Some inputs are not: tree.source is a file only when it is
not `dataset` or `builtin:NAME`, a table's images are named inside the table, and the alpha
sweep may not exist yet. The `inputs` stage runs on every `dvc repro` (it is cheap: file sizes
and times are checked first, and only changed files are read again) and writes, per stage, the
hash of every such file it reads; the stage depends on that record, so editing one of them
reruns exactly the stage that reads it, as editing a listed dependency would.

Running first, it is also where your own data is checked before any output is deleted: DVC
removes a stage's outputs before it runs the stage, so a bad label found by `prepare` itself
would cost the last good prepared data.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shdh.runtime.atomic import atomic_write_text

log = logging.getLogger(__name__)

STAGES = ("prepare", "tree", "evaluate")  # one record each: OUT_DIR/STAGE.json
STAT_CACHE = ".stat-cache.json"  # (size, mtime) -> md5 of files hashed before; not a DVC output


def stage_inputs(params: Mapping[str, Any]) -> dict[str, list[Path]]:
    """The files each stage reads beyond its dvc.yaml dependencies, for validated params.

    Your own data is checked here as the prepare step would check it before decoding an image
    (check_folder, check_table: files, labels, the tree): under `dvc repro` this stage runs
    first, and an error here stops the run before DVC deletes the prepared data to rerun
    prepare.
    """
    data, found = params["data"], {stage: [] for stage in STAGES}
    own = {"inner_labels": data.get("inner_labels", False), "name": data.get("name")}
    if data["dataset"] == "folder":
        from shdh.data.folder import check_folder

        skip = data.get("skip_bad_images", False)
        check_folder(data["raw_dir"], **own, skip_bad_images=skip)  # the folder: a dvc.yaml dep
    if data["dataset"] == "table":
        from shdh.data.table import check_table

        columns = data.get("table") or {}
        found["prepare"] = check_table(
            data["raw_dir"],
            columns.get("image_column", "image"),
            columns.get("label_column", "label"),
            **own,
        )
    source = params["tree"]["source"]
    if source != "dataset" and not source.startswith("builtin:"):
        if not Path(source).is_file():
            raise FileNotFoundError(f"tree.source: {source}: no such tree file")
        found["tree"] = [Path(source)]
    sweep = params["evaluate"].get("alpha_sweep")
    if sweep and Path(sweep).is_file():
        found["evaluate"] = [Path(sweep)]
    return found


def _md5(path: Path) -> str:
    digest = hashlib.md5()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _shown(path: Path) -> str:
    """A path as the record keeps it: relative to the working directory when below it, so that
    the record (and DVC's hash of it) does not change when the checkout moves."""
    rel = os.path.relpath(path.absolute())
    return path.absolute().as_posix() if rel.startswith(os.pardir) else Path(rel).as_posix()


def hashes(paths: list[Path], cache: dict[str, list]) -> dict[str, str]:
    """{path: md5} of `paths`; files whose size and modification time match `cache` are not read
    again (cache maps a path to [size, mtime_ns, md5] and is updated in place)."""
    out = {}
    for path in paths:
        key = _shown(path)
        try:
            stat = path.stat()
            known = cache.get(key)
            if known is None or known[:2] != [stat.st_size, stat.st_mtime_ns]:
                known = cache[key] = [stat.st_size, stat.st_mtime_ns, _md5(path)]
        except OSError as exc:
            raise OSError(f"{path}: cannot read an input file: {exc.strerror or exc}") from exc
        out[key] = known[2]
    return dict(sorted(out.items()))


def write_records(params: Mapping[str, Any], out_dir: str | Path) -> dict[str, Path]:
    """Write OUT_DIR/STAGE.json, the hashes of each stage's extra inputs; returns the paths."""
    out_dir = Path(out_dir)
    cache_path = out_dir / STAT_CACHE
    try:
        cache = json.loads(cache_path.read_text()) if cache_path.is_file() else {}
    except ValueError:
        cache = {}  # a damaged cache only costs reading the files again
    written, used = {}, {}
    for stage, paths in stage_inputs(params).items():
        record = {"stage": stage, "files": hashes(paths, cache)}
        used.update({key: cache[key] for key in record["files"]})
        written[stage] = out_dir / f"{stage}.json"
        atomic_write_text(written[stage], json.dumps(record, indent=1) + "\n")
        log.info("%s: %d input file(s) of stage %s", written[stage], len(paths), stage)
    atomic_write_text(cache_path, json.dumps(used) + "\n")
    return written
