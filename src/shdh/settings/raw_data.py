"""Your own data where data.raw_dir says it is, checked before anything derives from it.

For a folder or table dataset, data.raw_dir is the one input the user types by hand, and much
derives from it: the dataset's name (the results folder, results/NAME/PROFILE), the inputs
stage's records, the prepare step. A misspelt path then surfaces as whatever fails first: a
results folder that seems to belong to another dataset, `no such file`, DVC's `[Errno 2]`.
Checking it first, in every command (shdh.settings.load), names the key instead.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shdh.runtime.errors import ConfigError

# The table reader's formats (shdh.data.table.TABLE_SUFFIXES, which tests/unit/test_settings.py
# checks this equals), spelled out so that every stage's settings check does not import the
# image readers, and does not depend on their code in dvc.yaml.
TABLE_SUFFIXES = (".csv", ".parquet", ".pq")
KINDS = {
    "folder": "a folder tree of your images",
    "table": "a CSV or Parquet table of your images",
}


def check_raw_dir(data: Mapping[str, Any], source: str) -> None:
    """Refuse a folder or table dataset whose data.raw_dir does not exist, is not of the kind
    data.dataset says, or cannot be read; one line naming the params file, the key, the value
    and the problem. Built-in data sets are fetched into raw_dir, so theirs may be absent."""
    dataset = data["dataset"]
    if dataset not in KINDS:
        return
    raw = Path(data["raw_dir"])
    where = f"{source}: data.raw_dir: {raw}"
    wanted = f"data.dataset: {dataset} reads {KINDS[dataset]}"
    if not raw.exists():
        raise ConfigError(f"{where} does not exist ({wanted} there)")
    if dataset == "folder" and not raw.is_dir():
        raise ConfigError(f"{where} is not a folder ({wanted}; a table needs data.dataset: table)")
    if dataset == "table":
        if raw.is_dir():
            raise ConfigError(
                f"{where} is a folder, not a table file ({wanted}; a folder tree needs "
                "data.dataset: folder)"
            )
        if raw.suffix.lower() not in TABLE_SUFFIXES or not raw.is_file():
            raise ConfigError(
                f"{where} is not a table file ({wanted}: {', '.join(TABLE_SUFFIXES)})"
            )
    try:
        if raw.is_dir():
            with os.scandir(raw) as entries:
                next(entries, None)
        else:
            with open(raw, "rb") as f:
                f.read(1)
    except OSError as exc:
        raise ConfigError(f"{where} cannot be read: {exc.strerror or exc}") from None
