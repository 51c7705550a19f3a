"""features: 512-D GIST of every item, for the shallow baselines."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Output

from shdh.kfp.components.image import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def features(prepared: Input[Dataset], settings: str, gist: Output[Dataset]):
    """Compute GIST features (shdh features).

    Inputs:
        prepared: the dataset folder from `prepare`.
        settings: the `features` section of params.yaml as JSON (batch_size).
    Outputs:
        gist: the (N, 512) float32 .npy written by shdh.steps.features.
    """
    from shdh.runtime.instruction_set import pin_cpu

    pin_cpu()  # before numpy and torch load: the same bits on every CPU

    from shdh.kubeflow import section_arg
    from shdh.steps.features import features as gist_step

    gist_step(prepared.path, gist.path, batch_size=section_arg(settings, "features")["batch_size"])
