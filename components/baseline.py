"""baseline: fit one shallow method (ITQ, KMH, KSH, LFH, COSDISH, ...) on GIST features."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Model, Output

from shdh.kfp.components.image import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def baseline(
    prepared: Input[Dataset],
    similarity: Input[Dataset],
    gist: Input[Dataset],
    method: str,
    bits: int,
    own_seed: int,
    settings: str,
    seed: int,
    profile: str,
    pipeline_run_id: str,
    model: Output[Model],
):
    """Fit a shallow hashing method (shdh train --method METHOD --bits BITS).

    Inputs:
        prepared: the dataset folder from `prepare`.
        similarity: the S-matrix from `smatrix` (the pair labels).
        gist: the GIST features from `features`.
        method: a shallow method of shdh.hashers (itq, kmh, ksh, ksh+h, lfh, cosdish, ...).
        bits: the code length L.
        own_seed: the fit's own seed (one of baselines.seeds), or -1 for the master seed.
        settings: the `baselines` section of params.yaml as JSON.
        seed: the master seed.
        profile: the params profile (an MLflow tag).
        pipeline_run_id: the Kubeflow run id (the MLflow parent run's key).
    Outputs:
        model: the fitted hasher folder (hasher/, fit.json, mlflow_run.json).
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
        gist=gist,
    )
