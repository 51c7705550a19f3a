"""shdh train: fit methods (deep or shallow) at their code lengths; checkpoints every epoch.

One process fits every code length of its methods in turn: DVC runs one stage per deep method
(`train@shdh`, minutes each) and one for all the shallow ones (`baselines`: `--baselines`),
since a stage costs ~20 s of start-up (Python, PyTorch, MLflow, DVC), more than most shallow
fits. Each (method, bits), and each seed of `seeds` when set, is still its own model folder
and its own MLflow run. Deep models go
to train.models_dir, shallow ones to baselines.models_dir: one DVC output each.
"""

from __future__ import annotations

import argparse

from shdh import tracking
from shdh.atomic import check_writable
from shdh.commands.common import add_params_argument, params_section, pipeline_context, script_main
from shdh.hashers import REGISTRY
from shdh.plan import fit_plan, is_deep, method_bits, models_root, section_seeds
from shdh.steps.fit import fit
from shdh.training import RESUME_MODES

HELP = "fit methods at their code lengths (deep: SHDH, DPSH; shallow: ITQ, KSH, ...)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    methods = parser.add_mutually_exclusive_group()
    methods.add_argument(
        "--method",
        nargs="+",
        default=["shdh"],
        choices=list(REGISTRY),
        metavar="METHOD",
        help=f"methods to fit, in turn ({', '.join(REGISTRY)})",
    )
    methods.add_argument(
        "--baselines", action="store_true", help="every shallow method in baselines.methods"
    )
    parser.add_argument(
        "--bits",
        type=int,
        nargs="+",
        metavar="L",
        help="code lengths (default: train.bits for deep methods, baselines.bits for shallow "
        "ones; KMH skips lengths its subspaces do not divide)",
    )
    parser.add_argument(
        "--resume",
        nargs="?",
        const="always",
        default="never",
        choices=RESUME_MODES,
        help="deep methods: continue from the last checkpoint: always (bare --resume), auto "
        "(only if its settings match; what dvc repro uses) or never",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    methods = args.method
    if args.baselines:
        methods = list(params_section(args, "baselines")[1].get("methods") or [])
        if not methods:
            raise SystemExit(f"shdh train --baselines: {args.params}: baselines.methods is empty")
    context = None
    for method in methods:
        context = _fit_method(args, method, context)
    return 0


def _fit_method(args: argparse.Namespace, method: str, context: dict | None) -> dict:
    """Fit one method at each of its code lengths; returns the tracking context to reuse."""
    deep = is_deep(method)
    params, section = params_section(args, "train" if deep else "baselines")
    bits_list = args.bits or method_bits(params, method)
    if not bits_list:
        raise SystemExit(f"shdh train: no code length to fit {method} at (see --bits)")
    check_writable(
        models_root(params, method) / method, "train.models_dir" if deep else "baselines.models_dir"
    )
    context = context if context is not None else pipeline_context(args, params)
    with tracking.failure_ends(context["parent_run_id"]):
        for bits in bits_list:
            for own_seed in section_seeds(section):
                plan = fit_plan(
                    section,
                    method,
                    bits,
                    own_seed,
                    seed=params["seed"],
                    models_root=models_root(params, method),
                )
                out = fit(
                    plan,
                    prepared_dir=params["data"]["prepared_dir"],
                    smatrix_path=params["smatrix"]["out"],
                    features_path=None if deep else params["features"]["out"],
                    resume=args.resume,
                    progress=not args.no_progress,
                    **context,
                )
                print(f"model written to {out}")
    return context


def main(argv=None) -> int:
    return script_main(HELP, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
