"""shdh bundle: train on one machine, score on another (shdh.bundle).

    shdh bundle export [--out artifacts/bundle.npz]   # the prepared data and the train settings
    shdh bundle train BUNDLE --out DIR [--methods shdh] [--bits 64] [--seeds 0 1 2] ...
    shdh evaluate --codes-from DIR                     # score DIR's codes with the rest

`train` is also `python -m shdh.bundle train ...` on a machine with only PyTorch and numpy.
"""

from __future__ import annotations

import argparse

from shdh import bundle
from shdh.commands.common import add_params_argument, params_section, script_main

HELP = "export a run's prepared data as one file, or train the deep methods from such a file"
DEFAULT_OUT = "artifacts/bundle.npz"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    export = sub.add_parser("export", help="write the prepared data and train settings")
    add_params_argument(export)
    export.add_argument("--out", default=DEFAULT_OUT, help=f"bundle file (default {DEFAULT_OUT})")
    bundle.add_train_arguments(sub.add_parser("train", help="train the deep methods of a bundle"))


def run(args: argparse.Namespace) -> int:
    if args.action == "train":
        return bundle.run_train(args)
    params, train = params_section(args, "train")
    settings = {"train": train, "seed": params["seed"], "profile": params.get("profile", "")}
    out = bundle.export_bundle(
        params["data"]["prepared_dir"], params["smatrix"]["out"], args.out, settings
    )
    print(f"bundle written to {out} ({out.stat().st_size / 2**20:.1f} MiB)")
    return 0


def main(argv=None) -> int:
    return script_main(HELP, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
