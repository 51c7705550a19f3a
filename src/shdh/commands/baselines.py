"""shdh baselines: fit the shallow methods (ITQ, KMH, KSH, LFH, COSDISH, ...) on the GIST
features at their code lengths.

One process fits every shallow method of baselines.methods at every length of baselines.bits
(the DVC stage `baselines`), since a stage costs ~20 s of start-up (Python, MLflow, DVC), more
than most shallow fits. Each (method, bits), and each seed of baselines.seeds when set, is still
its own model folder under baselines.models_dir and its own MLflow run. It loads none of the
deep methods' code (shdh.steps.fit_shallow), so editing the training loop does not rerun it.
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
from shdh.hashers.method_catalogue import names
from shdh.plan.all_methods import method_bits, models_root
from shdh.runtime.errors import whole_number
from shdh.steps.fit_shallow import fit

HELP = "fit the shallow methods on GIST features (ITQ, KMH, KSH, LFH, COSDISH, ...)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument(
        "--method",
        nargs="+",
        choices=list(names("shallow")),
        metavar="METHOD",
        help=f"shallow methods to fit, in turn ({', '.join(names('shallow'))}; default: "
        "baselines.methods)",
    )
    parser.add_argument(
        "--bits",
        type=whole_number(1),
        nargs="+",
        metavar="L",
        help="code lengths (default: baselines.bits; KMH skips lengths its subspaces do not "
        "divide)",
    )


def run(args: argparse.Namespace) -> int:
    params, section = params_section(args, "baselines")
    methods = args.method or list(section.get("methods") or [])
    if not methods:
        raise SystemExit(f"shdh baselines: {args.params}: baselines.methods is empty")
    root = models_root(params, methods[0])
    context = None
    for method in methods:
        bits = args.bits or method_bits(params, method)
        if not bits:  # a method's own settings rule out every length (KMH's subspace size)
            raise SystemExit(
                f"shdh baselines: {args.params}: baselines.bits {section.get('bits')} holds no "
                f"code length that {method} can make with baselines.{method}: "
                f"{section.get(method)}"
            )
        context = fit_method(
            args,
            params,
            context,
            "baselines",
            method,
            bits,
            models_root=root,
            fit=fit,
            prepared_dir=params["data"]["prepared_dir"],
            smatrix_path=params["smatrix"]["out"],
            features_path=params["features"]["out"],
        )
    end_hand_run(context)
    return 0


def main(argv=None) -> int:
    return script_main(HELP, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
