"""The Kubeflow pipeline: the DAG, its cluster settings, and how it is compiled, run and submitted.

`shdh pipeline compile|run|submit` (shdh.commands.pipeline) imports this package from the checkout.
"""

from shdh.kfp.pipelines.cluster_settings import (
    DEFAULT_OVERLAY,
    ClusterSettings,
    SettingsError,
    settings_from_file,
    settings_from_overlay,
)
from shdh.kfp.pipelines.kfp_api import MIN_BACKEND, Credentials
from shdh.kfp.pipelines.kfp_patches import name_the_caller_from_its_frame
from shdh.kfp.pipelines.local import LocalRun, run_local
from shdh.kfp.pipelines.shdh_pipeline import PIPELINE_NAME, build_pipeline, compile_pipeline
from shdh.kfp.pipelines.submit import retry, submit

name_the_caller_from_its_frame()  # before any pipeline is built: compiling takes seconds, not 30

__all__ = [
    "DEFAULT_OVERLAY",
    "MIN_BACKEND",
    "PIPELINE_NAME",
    "ClusterSettings",
    "Credentials",
    "LocalRun",
    "SettingsError",
    "build_pipeline",
    "compile_pipeline",
    "retry",
    "run_local",
    "settings_from_file",
    "settings_from_overlay",
    "submit",
]
