"""smatrix: the compact hierarchical similarity artifact (never N x N)."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Output

from shdh.kfp.components.image import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def smatrix(
    prepared: Input[Dataset],
    labels: Input[Dataset],
    settings: str,
    seed: int,
    similarity: Output[Dataset],
):
    """Write the S-matrix artifact (shdh smatrix; paper Eq. 1-3 by shared depth).

    Inputs:
        prepared: the dataset folder from `prepare` (its split picks the dense sample).
        labels: the tree and ancestors from `tree`.
        settings: the `smatrix` section of params.yaml as JSON (sample_size).
        seed: the master seed (the dense sample).
    Outputs:
        similarity: the S-matrix .npz written by shdh.steps.smatrix.
    """
    from shdh.runtime.instruction_set import pin_cpu

    pin_cpu()  # before numpy and torch load: the same bits on every CPU

    from shdh.kubeflow import section_arg
    from shdh.steps.smatrix import smatrix as smatrix_step

    cfg = section_arg(settings, "smatrix")
    smatrix_step(
        labels.path,
        similarity.path,
        prepared_dir=prepared.path,
        sample_size=cfg["sample_size"],
        seed=seed,
    )
