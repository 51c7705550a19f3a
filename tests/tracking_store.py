"""Each test's own MLflow store, copied from one made empty once per worker.

MLflow makes a new SQLite store's tables by running its whole migration history, about 1.6 s
of CPU on these machines, on the first use of every store, and a few dozen tests track into a
store of their own; a copy of an empty store at the head revision costs a few milliseconds. The
tests that make a store as a user does (a fresh clone's `dvc repro`, the servers) still start
from nothing.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import shutil
import sqlite3
from pathlib import Path

STORE_NAME = "mlflow.db"


def make_empty_store(folder: Path) -> Path | None:
    """An MLflow store with its tables made and nothing logged, in folder; None where MLflow is
    not installed (a bare GPU machine runs the core's tests, which track nothing)."""
    if importlib.util.find_spec("mlflow") is None:
        return None
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    path = folder / STORE_NAME
    store = SqlAlchemyStore(f"sqlite:///{path}", str(folder / "mlruns"))
    store.engine.dispose()
    return path


def copy_store(empty: Path | None, folder: Path) -> Path:
    """A copy of the empty store in folder, its Default experiment's artifacts moved there too
    (MLflow wrote the template's folder into it), so that no two tests share a folder; without
    a template, the path alone."""
    folder.mkdir(parents=True)
    path = folder / STORE_NAME
    if empty is None:
        return path
    shutil.copyfile(empty, path)
    with contextlib.closing(sqlite3.connect(path)) as db, db:  # closed, after the commit
        db.execute(
            "UPDATE experiments SET artifact_location = ? WHERE experiment_id = 0",
            (str(folder / "mlruns" / "0"),),
        )
    return path


def remove_if_unused(path: Path, copied: os.stat_result | None) -> None:
    """Delete a test's store folder when the test left it as copied (same size and time, nothing
    beside it), so that the thousands of tests that never track leave no copies behind; a store
    a test wrote to stays for a look after a failure, as tmp_path does."""
    if copied is None:  # no template copied: the folder goes if the test left it empty
        with contextlib.suppress(OSError):
            path.parent.rmdir()
        return
    if not path.is_file():  # a test that removed it has nothing left to keep
        return
    stat = path.stat()
    alone = [p.name for p in path.parent.iterdir()] == [STORE_NAME]
    if alone and (stat.st_size, stat.st_mtime_ns) == (copied.st_size, copied.st_mtime_ns):
        shutil.rmtree(path.parent)
