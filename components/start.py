"""start: open the pipeline run's MLflow parent run, once, before the training fan-out."""

from kfp import dsl
from kfp.dsl import Dataset, Input

from components.image import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def start(prepared: Input[Dataset], profile: str, pipeline_run_id: str) -> str:
    """Create the MLflow parent run of this pipeline run and return its id.

    Every tracked step finds this run by its pipeline tag; creating it here, before the
    parallel training tasks, keeps them from racing to create one each. It is also the first
    call to the tracking server, so an unreachable MLFLOW_TRACKING_URI fails the run here,
    within seconds, naming the URI.

    Inputs:
        prepared: the dataset folder from `download` (its metadata: dataset, dvc_data_md5).
        profile: the params profile the run uses (a tag).
        pipeline_run_id: the Kubeflow run id (a tag, and the parent run's key).
    Outputs:
        Output: the MLflow run id of the parent run.
    """
    from shdh.stages.pipeline import run_context

    return run_context(prepared.metadata, profile, pipeline_run_id)["parent_run_id"]
