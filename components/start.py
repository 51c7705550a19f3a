"""start: open the pipeline run's MLflow parent run, once, before the training fan-out."""

from kfp import dsl
from kfp.dsl import Dataset, Input

from shdh.kfp.components.image import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def start(
    prepared: Input[Dataset],
    profile: str,
    pipeline_run_id: str,
    seed: int,
    data: str,
    tree: str,
    smatrix: str,
    features: str,
    train: str,
    baselines: str,
    evaluate: str,
) -> str:
    """Create the MLflow parent run of this pipeline run, RUNNING, and return its id.

    Every tracked step finds this run by its pipeline tag; creating it here, before the
    parallel training tasks, keeps them from racing to create one each. It is also the first
    call to the tracking server, so an unreachable MLFLOW_TRACKING_URI or refused credentials
    fail the run here, within seconds, naming the URI. The evaluate step closes the run; a
    tracked step that fails (training or evaluation) marks it FAILED.

    Inputs:
        prepared: the dataset folder from `prepare` (its metadata: dataset, dvc_data_md5).
        profile: the params profile the run uses (a tag).
        pipeline_run_id: the Kubeflow run id (a tag, and the parent run's key).
        seed: the master seed (a param of the parent run, as are the sections below).
        data: the `data` section of params.yaml as JSON.
        tree: the `tree` section as JSON.
        smatrix: the `smatrix` section as JSON.
        features: the `features` section as JSON.
        train: the `train` section as JSON.
        baselines: the `baselines` section as JSON.
        evaluate: the `evaluate` section as JSON.
    Outputs:
        Output: the MLflow run id of the parent run.
    """
    from shdh.runtime.instruction_set import pin_cpu

    pin_cpu()  # before numpy and torch load: the same bits on every CPU

    from shdh.kubeflow import pipeline_settings, run_context

    sections = {
        "data": data,
        "tree": tree,
        "smatrix": smatrix,
        "features": features,
        "train": train,
        "baselines": baselines,
        "evaluate": evaluate,
    }
    settings = pipeline_settings(seed, profile, sections)
    return run_context(prepared.metadata, profile, pipeline_run_id, settings)["parent_run_id"]
