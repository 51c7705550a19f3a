"""The index step: the split's database encoded by one encoder and written as a search index
(shdh.ranking.search_index), which `shdh serve` answers queries from.

The database is encoded as the score step encodes it (the same items in the same order, the
same inputs, the hasher's own encode), and the segment sizes and level weights (Eq. 2) are the
hasher's, the ones the score step ranks with: a query ranked by the index gets the evaluation's
ranking, ties included. The index records which encoder made it (the registered model's name,
version and alias; a fit's folder by the run that trained it), so a service can tell which
version it serves.

Two engines take the codes: the in-process index's two files (the default), or a Milvus
collection (shdh.vectordb), for a database past one machine or one that takes items while it
serves; out_dir then holds the collection's record (collection.json), DVC's output of the stage.
A collection's name carries the training run's id as well, so that two MLflow stores sharing
one Milvus server do not replace each other's: that record changes on every run, as the
collection, state outside DVC, does.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from shdh.ranking.index_file import ENCODER_FIELDS, INDEX_RECORD
from shdh.ranking.search_index import write_index
from shdh.runtime.atomic import atomic_dir, check_output_folder, check_writable
from shdh.steps import codes_cache
from shdh.steps.split_inputs import load_split
from shdh.vectordb.writer import CollectionTarget

COLLECTION_RECORD = "collection.json"  # out_dir's file with the Milvus engine

log = logging.getLogger(__name__)


def build_index(
    hasher: Any,
    *,
    prepared_dir: str | Path,
    smatrix_path: str | Path,
    out_dir: str | Path,
    encoder: Mapping[str, Any],
    features_path: str | Path | None = None,
    milvus: CollectionTarget | None = None,
    tree_dir: str | Path | None = None,
) -> Path:
    """Encode the database items of the prepared split with `hasher` and write the index to
    out_dir (index.npz, index.json), or, given `milvus`, into that collection (out_dir: its
    record). encoder: {name, version, alias, run_id} of the model, recorded as it is (None where
    unknown: a model folder used without the registry), but for a registry version's run id,
    which index.json leaves out (_without_registered_run). tree_dir: the tree step's folder, whose
    label tree a collection keeps to place the items added to it by their label paths."""
    missing = [f for f in ENCODER_FIELDS if f not in encoder]
    if missing:
        raise ValueError(f"index: the encoder's record lacks {', '.join(missing)}")
    check_writable(out_dir, "index.out_dir")
    earlier = COLLECTION_RECORD if Path(out_dir, COLLECTION_RECORD).exists() else INDEX_RECORD
    check_output_folder(out_dir, "index.out_dir", earlier)  # either engine's output
    if milvus is not None:
        _check_outside(milvus.uri, out_dir)
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
    record = {"method": hasher.name, "dataset": split.dataset, "encoder": dict(encoder)}
    layout = {"segment_sizes": hasher.segment_sizes(), "weights": hasher.segment_weights()}
    arrays = {"codes": codes, "item_ids": items["db_ids"], "ancestors": items["db_ancestors"]}
    if milvus is not None:
        paths = _label_paths(prepared_dir)
        written = _write_collection(milvus, out_dir, arrays, layout, record, paths, tree_dir)
    else:
        record["encoder"] = _without_registered_run(encoder)
        written = write_index(out_dir, **arrays, **layout, record=record)
    log.info(
        "index: %d items of %s, %d bits, in %s",
        len(database),
        split.dataset,
        hasher.n_bits,
        written,
    )
    return written


def _without_registered_run(encoder: Mapping[str, Any]) -> dict[str, Any]:
    """The encoder as index.json names it: a registry version by its name and version alone.
    The folder is the index stage's DVC output, whose bytes must be the same for the same
    codes, and a run id is new on every run of the same pipeline (a fresh clone's `make run`
    would leave dvc.lock modified); the version names the run in the registry, and the service
    compares versions (shdh.serving.state.check_match). A fit's folder keeps its run id, its
    only name."""
    if encoder.get("name") and encoder.get("version"):
        return {**encoder, "run_id": None}
    return dict(encoder)


def _check_outside(uri: str, out_dir: str | Path) -> None:
    """A Milvus Lite file outside out_dir, which the step replaces whole."""
    from shdh.vectordb.connection import is_server

    if not is_server(uri) and Path(out_dir).resolve() in Path(uri).resolve().parents:
        raise ValueError(
            f"index: the Milvus Lite file {uri} is inside index.out_dir {out_dir}, which the "
            "index step replaces whole; put it elsewhere (index.milvus_uri)"
        )


def _label_paths(prepared_dir: str | Path) -> list[str]:
    """The database items' label paths, in the split's order (a collection answers with them)."""
    from shdh.steps.prepare import load_prepared

    ds, split = load_prepared(prepared_dir)
    return [str(label) for label in ds.labels[split.db_idx]]


def _write_collection(target, out_dir, arrays, layout, record, label_paths, tree_dir) -> Path:
    """The codes into the target's collection, and its record into out_dir."""
    from shdh.core.hierarchy import LabelTree
    from shdh.steps.tree import TREE_FILE
    from shdh.vectordb import schema
    from shdh.vectordb.connection import connect, describe
    from shdh.vectordb.writer import write_collection

    tree = None if tree_dir is None else LabelTree.load(Path(tree_dir) / TREE_FILE).to_dict()
    encoder, method = record["encoder"], record["method"]
    n_bits = int(sum(layout["segment_sizes"]))
    name = target.collection or schema.collection_name(encoder, method, n_bits)
    client = connect(target.uri, target.token)
    try:
        written = write_collection(
            client,
            target.uri,
            name,
            **arrays,
            label_paths=label_paths,
            **layout,
            record={**record, "tree": tree},
            index_type=target.index_type,
            nlist=target.nlist,
        )
    finally:
        client.close()
    kept = {key: value for key, value in written.items() if key != "tree"}
    kept.update(engine="milvus", uri=describe(target.uri), collection=name)
    with atomic_dir(out_dir) as tmp:
        (Path(tmp) / COLLECTION_RECORD).write_text(json.dumps(kept, indent=2) + "\n")
    return Path(out_dir)


def registered_encoder(name: str, alias: str) -> tuple[Any, dict[str, Any]]:
    """The hasher that alias `alias` of registered model `name` points to, and its record.

    The alias is read again after the load: if it moved in between (a `shdh register` at the
    same moment), the version recorded might not be the one loaded, so the step stops."""
    import mlflow
    from mlflow.exceptions import MlflowException

    from shdh.tracking.model_registry import load_by_alias

    try:
        model = load_by_alias(name, alias, check_environment=False)  # the pipeline's own
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
