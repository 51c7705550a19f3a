"""shdh train: fit one method (deep or shallow) at one code length; checkpoints every epoch."""

from __future__ import annotations

import argparse

from shdh import fitting
from shdh.hashers import REGISTRY, get_hasher_class
from shdh.stages.common import add_params_argument, params_section, pipeline_context, script_main

HELP = "fit one method at one code length (deep: SHDH, DPSH; shallow: ITQ, KSH, ...)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--method", default="shdh", choices=list(REGISTRY), help="method name")
    parser.add_argument("--bits", type=int, required=True, help="code length L")
    parser.add_argument(
        "--resume", nargs="?", const="always", default="never", choices=fitting.RESUME_MODES,
        help="deep methods: continue from the last checkpoint: always (bare --resume), auto "
        "(only if its settings match; what dvc repro uses) or never",
    )  # fmt: skip
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    deep = get_hasher_class(args.method).input_kind == "images"
    params, section = params_section(args, "train" if deep else "baselines")
    out = fitting.train(
        args.method, args.bits, prepared_dir=params["data"]["prepared_dir"],
        smatrix_path=params["smatrix"]["out"], models_dir=params["train"]["models_dir"],
        section=section, features_path=None if deep else params["features"]["out"],
        seed=params["seed"], resume=args.resume, progress=not args.no_progress,
        **pipeline_context(args, params),
    )  # fmt: skip
    print(f"model written to {out}")
    return 0


def main(argv=None) -> int:
    return script_main(HELP, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
