"""shdh train: train one deep hasher at one code length, checkpointing every epoch."""

from __future__ import annotations

import argparse

from shdh import steps
from shdh.stages.common import add_params_argument, params_section, run_tags, script_main

HELP = "train a deep hasher (SHDH) at one code length; tracked in MLflow"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--method", default="shdh", help="deep method (default: shdh)")
    parser.add_argument("--bits", type=int, required=True, help="code length L")
    parser.add_argument(
        "--resume",
        nargs="?",
        const="always",
        default="never",
        choices=("never", "auto", "always"),
        help="continue from the last checkpoint: always (bare --resume), auto "
        "(only if its settings match; what dvc repro uses) or never",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    params, train = params_section(args, "train")
    out = steps.train(
        args.method,
        args.bits,
        prepared_dir=params["data"]["prepared_dir"],
        smatrix_path=params["smatrix"]["out"],
        models_dir=train["models_dir"],
        train_params=train,
        seed=params["seed"],
        resume=args.resume,
        progress=not args.no_progress,
        tags=run_tags(params),
    )
    print(f"model written to {out}")
    return 0


def main(argv=None) -> int:
    return script_main(HELP, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
