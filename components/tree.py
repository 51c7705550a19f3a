"""tree: the label tree and every item's ancestor at each level."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Output

from shdh.kfp.components.image import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def tree(prepared: Input[Dataset], settings: str, labels: Output[Dataset]):
    """Build the label tree and the ancestor matrix (shdh tree).

    Inputs:
        prepared: the dataset folder from `prepare`.
        settings: the `tree` section of params.yaml as JSON (source: builtin:NAME or a file).
    Outputs:
        labels: tree.json and ancestors.npy, as shdh.steps.tree writes them.
    """
    from shdh.runtime.instruction_set import pin_cpu

    pin_cpu()  # before numpy and torch load: the same bits on every CPU

    from shdh.kubeflow import section_arg
    from shdh.steps.tree import tree as tree_step

    tree_step(prepared.path, labels.path, source=section_arg(settings, "tree")["source"])
