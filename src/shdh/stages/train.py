"""shdh train: fit one method (deep or shallow) at its code lengths; checkpoints every epoch.

One process fits every code length of a method in turn: the DVC stage is per method
(`train@shdh`, `baseline@itq`), since starting Python with PyTorch and MLflow costs about ten
seconds, more than most shallow fits. Each (method, bits) is still its own model folder and its
own MLflow run.
"""

from __future__ import annotations

import argparse

from shdh import fitting
from shdh.hashers import REGISTRY, get_hasher_class
from shdh.stages.common import add_params_argument, params_section, pipeline_context, script_main

HELP = "fit one method at its code lengths (deep: SHDH, DPSH; shallow: ITQ, KSH, ...)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument("--method", default="shdh", choices=list(REGISTRY), help="method name")
    parser.add_argument(
        "--bits", type=int, nargs="+", metavar="L",
        help="code lengths (default: train.bits for deep methods, baselines.bits for shallow "
        "ones; KMH skips lengths its subspaces do not divide)",
    )  # fmt: skip
    parser.add_argument(
        "--resume", nargs="?", const="always", default="never", choices=fitting.RESUME_MODES,
        help="deep methods: continue from the last checkpoint: always (bare --resume), auto "
        "(only if its settings match; what dvc repro uses) or never",
    )  # fmt: skip
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    from shdh.stages.evaluate import method_bits

    deep = get_hasher_class(args.method).input_kind == "images"
    params, section = params_section(args, "train" if deep else "baselines")
    bits_list = args.bits or method_bits(params, args.method)
    if not bits_list:
        raise SystemExit(f"shdh train: no code length to fit {args.method} at (see --bits)")
    context = pipeline_context(args, params)
    for bits in bits_list:
        out = fitting.train(
            args.method, bits, prepared_dir=params["data"]["prepared_dir"],
            smatrix_path=params["smatrix"]["out"], models_dir=params["train"]["models_dir"],
            section=section, features_path=None if deep else params["features"]["out"],
            seed=params["seed"], resume=args.resume, progress=not args.no_progress, **context,
        )  # fmt: skip
        print(f"model written to {out}")
    return 0


def main(argv=None) -> int:
    return script_main(HELP, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
