"""Pipeline steps as commands: each module parses arguments and makes one library call.

Every module has `add_arguments(parser)`, `run(args)` and `main(argv)`, so a step runs as
`shdh STEP`, as `python -m shdh.commands.STEP`, or from DVC and Kubeflow with the same flags.

Importing this package pins the CPU maths (shdh.runtime.instruction_set): every command module loads
numpy or torch, and Python imports this package before any of them, whichever way a step is started.

May import: bundle, core, data, features, hashers, kfp, kubeflow, nets, pipelines, plan,
ranking, reporting, runtime, serving, settings, steps, tracking, training, vectordb.
"""

from shdh.runtime.instruction_set import pin_cpu

pin_cpu()

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
