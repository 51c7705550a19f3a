"""Pipeline steps as commands: each module parses arguments and makes one library call.

Every module has `add_arguments(parser)`, `run(args)` and `main(argv)`, so a step runs as
`shdh STEP`, as `python -m shdh.commands.STEP`, or from DVC and Kubeflow with the same flags.
"""

STEPS = (
    "fetch",
    "inputs",
    "prepare",
    "tree",
    "smatrix",
    "features",
    "train",
    "baselines",
    "bundle",
    "evaluate",
    "register",
    "metrics",
    "profile",
    "results",
    "report",
)
