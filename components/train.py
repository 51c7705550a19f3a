"""train: fit one deep method (SHDH, DPSH) at one code length; the step that wants a GPU."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Model, Output

from shdh.kfp.components.image import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def train(
    prepared: Input[Dataset],
    similarity: Input[Dataset],
    method: str,
    bits: int,
    own_seed: int,
    settings: str,
    seed: int,
    profile: str,
    pipeline_run_id: str,
    model: Output[Model],
):
    """Train a deep hashing network (shdh train --method METHOD --bits BITS).

    Inputs:
        prepared: the dataset folder from `prepare`.
        similarity: the S-matrix from `smatrix` (the pair labels).
        method: a deep method of shdh.hashers (shdh, dpsh).
        bits: the code length L.
        own_seed: the fit's own seed (one of train.seeds), or -1 for the master seed.
        settings: the `train` section of params.yaml as JSON.
        seed: the master seed (initialisation, shuffles).
        profile: the params profile (an MLflow tag).
        pipeline_run_id: the Kubeflow run id (the MLflow parent run's key).
    Outputs:
        model: the fitted hasher folder (hasher/, fit.json, history.json, mlflow_run.json);
            the run also logs the encoder as an MLflow model.

    With SHDH_CHECKPOINT_URL set (s3://bucket/prefix; on a cluster from the ConfigMap
    shdh-config), every epoch's checkpoint goes to PREFIX/PIPELINE_RUN_ID/METHOD-BITS[-seedS]/ in
    the object store, and a retried task resumes from there (shdh.checkpoint_store). Unset (a
    local run), checkpoints stay in the task's temporary folder.
    """
    from shdh.runtime.instruction_set import pin_cpu

    pin_cpu()  # before numpy and torch load: the same bits on every CPU

    from shdh.kubeflow import fit_component

    fit_component(
        prepared=prepared,
        similarity=similarity,
        method=method,
        bits=bits,
        own_seed=own_seed,
        settings=settings,
        seed=seed,
        profile=profile,
        pipeline_run_id=pipeline_run_id,
        model=model,
    )
