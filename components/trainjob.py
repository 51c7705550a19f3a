"""trainjob: fit one deep method at one code length over several nodes, as a Kubeflow
Trainer TrainJob; the task itself only launches the job and waits (it needs no GPU)."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Model, Output

from shdh.kfp.components.image import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def trainjob(
    prepared: Input[Dataset],
    similarity: Input[Dataset],
    method: str,
    bits: int,
    own_seed: int,
    settings: str,
    seed: int,
    profile: str,
    pipeline_run_id: str,
    nodes: str,
    model: Output[Model],
):
    """Train a deep hashing network on train.nodes x train.processes_per_node processes.

    Inputs:
        prepared, similarity, method, bits, own_seed, settings, seed, profile,
            pipeline_run_id: as the `train` component's.
        nodes: JSON, where the TrainJob's nodes run: {"image", "gpu", "resources" (the SDK's
            resources_per_node: cpu, memory), "node_selector", "tolerations"}.
    Outputs:
        model: the fitted hasher folder, as `train` writes it.

    Needs SHDH_CHECKPOINT_URL (the ConfigMap shdh-config): the step stages the inputs there,
    the nodes keep the checkpoint there, rank 0 puts the model there (shdh.trainjob).
    The pipeline's service account must be allowed to create TrainJobs (k8s/base/rbac.yaml).
    A failed job fails the step with the job's reason; a retry launches it again, and it
    resumes from the last checkpoint.
    """
    from shdh.runtime.instruction_set import pin_cpu

    pin_cpu()  # before numpy loads, as in every component

    import json

    from shdh.trainjob import launch

    launch(
        prepared=prepared,
        similarity=similarity,
        run={"method": method, "bits": bits, "own_seed": own_seed},
        settings=settings,
        seed=seed,
        profile=profile,
        pipeline_run_id=pipeline_run_id,
        nodes=json.loads(nodes),
        model=model,
    )
