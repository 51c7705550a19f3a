"""The files a stage reads that dvc.yaml does not list, as content hashes DVC can depend on.

Two kinds. First, a stage's own code: the modules its command imports, transitively, listed per
stage in stage-code.json (generated from the import graph by `make dvc-deps`, checked by
tests/unit/test_dvc_deps.py). Listing them in dvc.yaml instead made dvc.lock thousands of lines,
which DVC parses again around every stage it runs: on two cores that was about 25 s of a smoke
`dvc exp run` and 10 s of a `dvc repro`, spent on YAML.

Second, the inputs params.yaml names only sometimes: tree.source is a file only when it is not
`dataset` or `builtin:NAME`, a table's images are named inside the table, and the alpha sweep may
not exist yet.

The `inputs` stage runs on every `dvc repro` (it is cheap: file sizes and times are checked
first, and only changed files are read again) and writes, per stage, the hash of every such file
it reads; the stage depends on that record, so editing one of them reruns exactly the stage that
reads it, as editing a listed dependency would. `dvc status` sees such an edit once the stage
has run (`shdh inputs`, or any `dvc repro`).

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

STAGES = ("prepare", "tree", "evaluate")  # the stages that may read files params.yaml names
CODE_LIST = "stage-code.json"  # {"stages": {stage: [source files]}}, from `make dvc-deps`
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


def load_code_list(path: str | Path = CODE_LIST) -> dict[str, list[Path]]:
    """{stage: its code files} from stage-code.json; a missing or malformed list, or a listed
    file that is gone, is named with the field at fault before any record is written."""
    path = Path(path)
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{path}: no such file: the code each DVC stage runs (`make dvc-deps` writes it)"
        ) from None
    except ValueError as exc:
        raise ValueError(f"{path}: not JSON: {exc}") from None
    stages = document.get("stages") if isinstance(document, dict) else None
    if not isinstance(stages, dict):
        raise ValueError(f"{path}: stages: expected an object of stage: [source files]")
    found = {}
    for stage, files in stages.items():
        if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
            raise ValueError(f"{path}: stages.{stage}: expected a list of file paths")
        found[stage] = [path.parent / f for f in files]  # relative to the list, as in dvc.yaml
        missing = [f for f, p in zip(files, found[stage], strict=True) if not p.is_file()]
        if missing:
            raise FileNotFoundError(
                f"{path}: stages.{stage}: {', '.join(missing)}: no such file; the list is out of "
                "date (`make dvc-deps` regenerates it)"
            )
    return found


def write_records(
    params: Mapping[str, Any],
    out_dir: str | Path,
    code: Mapping[str, list[Path]] | None = None,
) -> dict[str, Path]:
    """Write OUT_DIR/STAGE.json, the hashes of each stage's extra inputs ("files") and of its
    code ("code", from load_code_list); returns the paths."""
    out_dir = Path(out_dir)
    cache_path = out_dir / STAT_CACHE
    try:
        cache = json.loads(cache_path.read_text()) if cache_path.is_file() else {}
    except ValueError:
        cache = {}  # a damaged cache only costs reading the files again
    code = code or {}
    extra = stage_inputs(params)
    written, used = {}, {}
    for stage in [*code, *(s for s in STAGES if s not in code)]:
        record = {"stage": stage, "files": hashes(extra.get(stage, []), cache)}
        if stage in code:
            record["code"] = hashes(code[stage], cache)
        for hashed in (record["files"], record.get("code", {})):
            used.update({key: cache[key] for key in hashed})
        written[stage] = out_dir / f"{stage}.json"
        atomic_write_text(written[stage], json.dumps(record, indent=1) + "\n")
        log.info(
            "%s: %d code file(s) and %d other input file(s) of stage %s",
            written[stage],
            len(record.get("code", {})),
            len(record["files"]),
            stage,
        )
    atomic_write_text(cache_path, json.dumps(used) + "\n")
    return written
