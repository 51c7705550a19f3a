"""shdh index: the search index of the database, encoded by the registered encoder.

    shdh index                               # models:/NAME@ALIAS of params.yaml's index section
    shdh index --name my-encoder --alias staging
    shdh index --model-dir artifacts/models/shdh/shdh-64   # a fitted model, without MLflow
    shdh index --engine milvus --uri http://milvus:19530   # into a Milvus collection

The index (index.out_dir: index.npz and index.json) is what `shdh serve` answers from; its
index.json records the encoder's name, version, alias and run. With `--engine milvus` (or
index.engine: milvus) the codes go into a Milvus collection named for the encoder, and out_dir
holds its record (collection.json); the server's token comes from $SHDH_MILVUS_TOKEN.
"""

from __future__ import annotations

import argparse

from shdh.commands.common import add_params_argument, load_settings, script_main
from shdh.steps.index import build_index, folder_encoder, registered_encoder
from shdh.vectordb.writer import CollectionTarget

HELP = "encode the database with the registered encoder and write the search index"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument(
        "--name", help="registered model name (default: the index section's model_name)"
    )
    parser.add_argument("--alias", help="its alias (default: the index section's alias)")
    parser.add_argument(
        "--model-dir",
        metavar="DIR",
        help="encode with the fitted model in DIR (a fit's folder or its hasher/ folder) "
        "instead of the registry's",
    )
    parser.add_argument("--out", metavar="DIR", help="the index folder (default: index.out_dir)")
    parser.add_argument(
        "--engine", choices=("memory", "milvus"), help="where the codes go (default: index.engine)"
    )
    parser.add_argument(
        "--uri", help="with milvus: a Milvus Lite file or http(s)://HOST:PORT (index.milvus_uri)"
    )
    parser.add_argument(
        "--collection", help="with milvus: the collection (default: named for the encoder)"
    )
    parser.add_argument(
        "--index-type",
        choices=("BIN_FLAT", "BIN_IVF_FLAT"),
        help="with milvus: the collection's index (default: index.milvus_index)",
    )


def run(args: argparse.Namespace) -> int:
    checked = load_settings(args)
    params, section = checked.params, checked.typed.index
    if args.model_dir:
        if args.name or args.alias:
            raise ValueError("shdh index: give --model-dir or --name/--alias, not both")
        hasher, encoder = folder_encoder(args.model_dir)
        source = args.model_dir
    else:
        name, alias = args.name or section.model_name, args.alias or section.alias
        hasher, encoder = registered_encoder(name, alias)
        source = f"models:/{name}@{alias} (version {encoder['version']})"
    milvus = _collection_target(args, section)
    out = build_index(
        hasher,
        prepared_dir=params["data"]["prepared_dir"],
        smatrix_path=params["smatrix"]["out"],
        out_dir=args.out or section.out_dir,
        encoder=encoder,
        features_path=params["features"]["out"],
        milvus=milvus,
        tree_dir=params["tree"]["out_dir"],
    )
    where = f"{out}/" if milvus is None else f"{milvus.uri} (its record in {out}/)"
    print(f"indexed the database with {hasher.name}-{hasher.n_bits} from {source}: {where}")
    return 0


def _collection_target(args: argparse.Namespace, section) -> CollectionTarget | None:
    """The Milvus collection to write, when the engine is milvus (flags over params.yaml)."""
    if (args.engine or section.engine) != "milvus":
        if args.uri or args.collection or args.index_type:
            raise ValueError("shdh index: --uri, --collection, --index-type need --engine milvus")
        return None
    return CollectionTarget(
        uri=args.uri or section.milvus_uri,
        collection=args.collection or section.milvus_collection,
        index_type=args.index_type or section.milvus_index,
        nlist=section.milvus_nlist,
    )


def main(argv=None) -> int:
    return script_main(HELP, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
