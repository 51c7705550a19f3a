"""The Kubeflow pipeline: the DAG, its cluster settings, and how it is compiled, run and submitted.

`shdh pipeline compile|run|submit` (shdh.stages.pipeline) imports this package from the checkout.
"""

from pipelines.cluster import DEFAULT_SCHEDULING_FILE, TrainScheduling, load_scheduling
from pipelines.local import LocalRun, run_local
from pipelines.shdh_pipeline import PIPELINE_NAME, build_pipeline, compile_pipeline
from pipelines.submit import submit

__all__ = [
    "DEFAULT_SCHEDULING_FILE",
    "PIPELINE_NAME",
    "LocalRun",
    "TrainScheduling",
    "build_pipeline",
    "compile_pipeline",
    "load_scheduling",
    "run_local",
    "submit",
]
