"""train: fit one deep method (SHDH, DPSH) at one code length; the step that wants a GPU."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Model, Output

from components.image import IMAGE


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
    shdh-config), every epoch's checkpoint goes to PREFIX/PIPELINE_RUN_ID/METHOD-BITS-seedS/ in
    the object store, and a retried task resumes from there (shdh.checkpoint_store). Unset (a
    local run), checkpoints stay in the task's temporary folder.
    """
    from shdh.cpu_pin import pin_cpu

    pin_cpu()  # before numpy and torch load: the same bits on every CPU

    import tempfile

    from shdh import checkpoint_store
    from shdh.kubeflow import own_seed_arg, run_context, save_model, section_arg
    from shdh.plan import fit_plan
    from shdh.steps.fit import run_name
    from shdh.steps.fit_deep import fit

    section = section_arg(settings, "train")
    with tempfile.TemporaryDirectory(prefix="shdh-models-") as models_dir:
        plan = fit_plan(
            section, method, bits, own_seed_arg(own_seed), seed=seed, models_root=models_dir
        )
        # The seed always, so that the key names the fit whether or not the run fits several.
        key = run_name(method, bits, plan.seed)
        checkpoints = checkpoint_store.from_env(pipeline_run_id, key)
        context = run_context(prepared.metadata, profile, pipeline_run_id)
        out = fit(
            plan,
            prepared_dir=prepared.path,
            smatrix_path=similarity.path,
            progress=False,
            resume="auto",
            checkpoints=checkpoints,
            **context,
        )
        save_model(out, model)
