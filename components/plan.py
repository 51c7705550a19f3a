"""plan: the (method, bits, seed) runs one branch of the pipeline fans out over."""

from kfp import dsl

from components.image import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def plan(train: str, baselines: str, kind: str) -> list:
    """List the runs of one kind, in the order `shdh evaluate` scores them.

    The DAG fans out over one list of {method, bits} per kind rather than over nested loops
    of methods and bits, because Kubeflow collects the outputs of one loop level only.

    Inputs:
        train: the `train` section of params.yaml as JSON (methods, bits: the deep runs).
        baselines: the `baselines` section as JSON (methods, bits: the shallow runs).
        kind: "deep" (image methods) or "shallow" (GIST methods).
    Outputs:
        Output: a list of {"method": str, "bits": int, "own_seed": int} (own_seed: the fit's
            seed from a `seeds` list, or -1 for the master seed).
    """
    from shdh.cpu_pin import pin_cpu

    pin_cpu()  # before numpy and torch load: the same bits on every CPU

    from shdh.kubeflow import branch_runs, section_arg

    return branch_runs(section_arg(train, "train"), section_arg(baselines, "baselines"), kind)
