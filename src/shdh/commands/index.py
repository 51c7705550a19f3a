"""shdh index: the search index of the database, encoded by the registered encoder.

    shdh index                               # models:/NAME@ALIAS of params.yaml's index section
    shdh index --name my-encoder --alias staging
    shdh index --model-dir artifacts/models/shdh/shdh-64   # a fitted model, without MLflow

The index (index.out_dir: index.npz and index.json) is what `shdh serve` answers from; its
index.json records the encoder's name, version, alias and run.
"""

from __future__ import annotations

import argparse

from shdh.commands.common import add_params_argument, load_settings, script_main
from shdh.steps.index import build_index, folder_encoder, registered_encoder

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
    out = build_index(
        hasher,
        prepared_dir=params["data"]["prepared_dir"],
        smatrix_path=params["smatrix"]["out"],
        out_dir=args.out or section.out_dir,
        encoder=encoder,
        features_path=params["features"]["out"],
    )
    print(f"indexed the database with {hasher.name}-{hasher.n_bits} from {source}: {out}/")
    return 0


def main(argv=None) -> int:
    return script_main(HELP, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
