"""The index step: the split's database encoded by one encoder and written as a search index
(shdh.ranking.search_index), which `shdh serve` answers queries from.

The database is encoded as the score step encodes it (the same items in the same order, the
same inputs, the hasher's own encode), and the segment sizes and level weights (Eq. 2) are the
hasher's, the ones the score step ranks with: a query ranked by the index gets the evaluation's
ranking, ties included. The index records which encoder made it (the registered model's name,
version and alias, and the run that trained it), so a service can tell which version it serves.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shdh.ranking.index_file import ENCODER_FIELDS, INDEX_RECORD
from shdh.ranking.search_index import write_index
from shdh.runtime.atomic import check_output_folder, check_writable
from shdh.steps import codes_cache
from shdh.steps.split_inputs import load_split

log = logging.getLogger(__name__)


def build_index(
    hasher: Any,
    *,
    prepared_dir: str | Path,
    smatrix_path: str | Path,
    out_dir: str | Path,
    encoder: Mapping[str, Any],
    features_path: str | Path | None = None,
) -> Path:
    """Encode the database items of the prepared split with `hasher` and write the index to
    out_dir (index.npz, index.json). encoder: {name, version, alias, run_id} of the model,
    recorded as it is (None where unknown: a model folder used without the registry)."""
    missing = [f for f in ENCODER_FIELDS if f not in encoder]
    if missing:
        raise ValueError(f"index: the encoder's record lacks {', '.join(missing)}")
    check_writable(out_dir, "index.out_dir")
    check_output_folder(out_dir, "index.out_dir", INDEX_RECORD)
    # GIST features only for a shallow hasher: a deep one would read a large file for nothing.
    features = features_path if hasher.input_kind == "features" else None
    split = load_split(prepared_dir, smatrix_path, features)
    if hasher.input_kind not in split.inputs:
        raise ValueError(
            f"index: {hasher.name} encodes {hasher.input_kind}, which the index step was not "
            f"given (features: {features_path})"
        )
    _, database = split.encoded(hasher.input_kind, {})
    items = split.items()
    rows = codes_cache.RowKeys(split.inputs)(hasher.input_kind, split.db_idx)
    codes, _, read = codes_cache.cached_encode(hasher, database, rows)
    if read:  # the codes evaluate encoded with the same model
        log.info("index: the database's codes were read from %s", codes_cache.cache_dir())
    written = write_index(
        out_dir,
        codes=codes,
        item_ids=items["db_ids"],
        ancestors=items["db_ancestors"],
        segment_sizes=hasher.segment_sizes(),
        weights=hasher.segment_weights(),
        record={"method": hasher.name, "dataset": split.dataset, "encoder": dict(encoder)},
    )
    log.info(
        "index: %d items of %s, %d bits, in %s",
        len(database),
        split.dataset,
        hasher.n_bits,
        written,
    )
    return written


def registered_encoder(name: str, alias: str) -> tuple[Any, dict[str, Any]]:
    """The hasher that alias `alias` of registered model `name` points to, and its record.

    The alias is read again after the load: if it moved in between (a `shdh register` at the
    same moment), the version recorded might not be the one loaded, so the step stops."""
    import mlflow
    from mlflow.exceptions import MlflowException

    from shdh.tracking.model_registry import load_by_alias

    try:
        model = load_by_alias(name, alias)
        version = mlflow.MlflowClient().get_model_version_by_alias(name, alias)
    except MlflowException as err:
        raise RuntimeError(
            f"models:/{name}@{alias}: cannot load it from the registry ({err.message}); "
            "register an encoder first (shdh register) or index a fitted model (--model-dir)"
        ) from err
    if version.run_id != model.metadata.run_id:
        raise RuntimeError(
            f"models:/{name}@{alias} moved to version {version.version} while it was loading; "
            "run the index step again"
        )
    hasher = model.unwrap_python_model().hasher
    record = {"name": name, "version": str(version.version), "alias": alias}
    return hasher, {**record, "run_id": version.run_id}


def folder_encoder(model_dir: str | Path) -> tuple[Any, dict[str, Any]]:
    """The hasher saved in a fit's model folder (its hasher/ inside) or in a hasher folder
    itself, and its record: no registry version or alias; the run id where the fit recorded
    its MLflow run."""
    from shdh.hashers import load_hasher
    from shdh.tracking.mlflow_runs import fitted_hasher

    hasher_dir, run_id = fitted_hasher(model_dir)
    return load_hasher(hasher_dir), {"name": None, "version": None, "alias": None, "run_id": run_id}
