"""shdh train: train deep methods (every deep method of shdh.hashers.method_catalogue, the
classifier oracle among them) at their code lengths; checkpoints every epoch.

One process fits every code length of its methods in turn: DVC runs one stage per deep method
(`train@shdh`, minutes each). Each (method, bits), and each seed of train.seeds when set, is its
own model folder under train.models_dir and its own MLflow run. The shallow methods have a step
of their own, `shdh baselines`, so that neither loads the other's code (nor does its DVC stage
rerun when that code changes).
"""

from __future__ import annotations

import argparse

from shdh.commands.common import (
    add_params_argument,
    end_hand_run,
    params_section,
    script_main,
)
from shdh.commands.fitting import fit_method
from shdh.hashers.method_catalogue import METHODS, PAPER_METHOD, names
from shdh.plan.all_methods import method_bits, models_root
from shdh.plan.processes import refuse_several_processes
from shdh.runtime.errors import whole_number
from shdh.steps.fit_deep import fit
from shdh.training.checkpoint import RESUME_MODES

# Named from the catalogue, so that a method declared there is listed here too.
HELP = (
    "train deep methods at their code lengths ("
    + ", ".join(m.title for m in METHODS if m.deep and not m.reference)
    + "; "
    + ", ".join(f"the {m.title}" for m in METHODS if m.deep and m.reference)
    + ")"
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument(
        "--method",
        nargs="+",
        default=[PAPER_METHOD],
        choices=list(names("deep")),
        metavar="METHOD",
        help=f"deep methods to train, in turn ({', '.join(names('deep'))}); the shallow ones: "
        "shdh baselines",
    )
    # Older scripts fit the shallow methods with this flag: it names their own step.
    parser.add_argument("--baselines", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--bits",
        type=whole_number(1),
        nargs="+",
        metavar="L",
        help="code lengths (default: train.bits)",
    )
    parser.add_argument(
        "--resume",
        nargs="?",
        const="always",
        default="never",
        choices=RESUME_MODES,
        help="continue from the last checkpoint: always (bare --resume), auto (only if its "
        "settings match; what dvc repro uses) or never",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def run(args: argparse.Namespace) -> int:
    if args.baselines:
        raise SystemExit(
            "shdh train --baselines: the shallow methods have their own step: shdh baselines"
        )
    context = None
    for method in args.method:
        context = _fit_method(args, method, context)
    end_hand_run(context)
    return 0


def _fit_method(args: argparse.Namespace, method: str, context: dict | None) -> dict:
    """Train one method at each of its code lengths; returns the tracking context to reuse."""
    params, section = params_section(args, "train")
    refuse_several_processes(section, "shdh train (dvc repro)")
    return fit_method(
        args,
        params,
        context,
        "train",
        method,
        args.bits or method_bits(params, method),
        models_root=models_root(params, method),
        fit=fit,
        prepared_dir=params["data"]["prepared_dir"],
        smatrix_path=params["smatrix"]["out"],
        resume=args.resume,
        progress=not args.no_progress,
    )


def main(argv=None) -> int:
    return script_main(HELP, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
