"""report: the results in the layout of the paper's Table 1, the paper's numbers beside them."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Markdown, Output

from shdh.kfp.components.image import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def report(
    prepared: Input[Dataset],
    results: Input[Dataset],
    settings: str,
    profile: str,
    pipeline_run_id: str,
    document: Output[Markdown],
):
    """Write the results document (the tables `shdh evaluate` writes into docs/results.md) and
    attach it to the pipeline's MLflow parent run as report/results.md.

    Inputs:
        prepared: the dataset folder from `prepare` (its metadata names the dataset).
        results: the folder from `evaluate` (metrics.json).
        settings: the `evaluate` section of params.yaml as JSON (n).
        profile: the params profile (an MLflow tag).
        pipeline_run_id: the Kubeflow run id (the MLflow parent run's key).
    Outputs:
        document: the Markdown report, shown in the Kubeflow UI.
    """
    from shdh.runtime.instruction_set import pin_cpu

    pin_cpu()  # before numpy and torch load: the same bits on every CPU

    from pathlib import Path

    from shdh.kubeflow import section_arg
    from shdh.reporting.report import read_metrics, write_report
    from shdh.tracking.mlflow_runs import attach_text
    from shdh.tracking.parent_run import parent_of_pipeline

    scores = read_metrics(results.path)
    write_report(
        document.path,
        scores,
        [],
        dataset=prepared.metadata["dataset"],
        n=section_arg(settings, "evaluate")["n"],
    )
    attach_text(
        parent_of_pipeline(pipeline_run_id), Path(document.path).read_text(), "report/results.md"
    )
