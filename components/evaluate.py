"""evaluate: encode, rank and score every fitted method; metrics, codes files and plots."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Metrics, Model, Output

from components.image import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def evaluate(
    prepared: Input[Dataset], similarity: Input[Dataset], deep_runs: list, shallow_runs: list,
    settings: str, seed: int, profile: str, pipeline_run_id: str, results: Output[Dataset],
    metrics: Output[Metrics], deep_models: Input[list[Model]] | None = None,
    shallow_models: Input[list[Model]] | None = None, gist: Input[Dataset] | None = None,
):  # fmt: skip
    """Score every model (shdh evaluate), log the metrics to each model's MLflow run, write the
    results table, scores and figures onto the pipeline's parent run and close it.

    Inputs:
        prepared: the dataset folder from `download` (the query/database split).
        similarity: the S-matrix from `smatrix` (the ancestors that define relevance).
        deep_runs: the deep {method, bits, replicate} runs, from `plan`, in scoring order.
        shallow_runs: the shallow {method, bits, replicate} runs, from `plan` (empty without
            baselines).
        settings: the `evaluate` section of params.yaml as JSON (n, wr_ns, curve_max, ...).
        seed: the master seed (the random-codes floor).
        profile: the params profile (an MLflow tag).
        pipeline_run_id: the Kubeflow run id (the MLflow parent run's key).
        deep_models: every `train` output (absent without deep runs).
        shallow_models: every `baseline` output (absent without baselines).
        gist: the GIST features from `features` (absent without baselines).
    Outputs:
        results: metrics.json, timings.json, table.md, codes/ and plots/, as in results/.
        metrics: the @n metrics of every method and code length, for the Kubeflow UI.
    """
    import tempfile

    from shdh import evaluation
    from shdh.parent_run import end_parent, failure_ends, summarize
    from shdh.stages.pipeline import (
        gather_models,
        kfp_metrics,
        replicate_arg,
        run_context,
        section_arg,
    )

    cfg = {**section_arg(settings, "evaluate"), "report": None}  # the report step writes it
    models = [*(deep_models or []), *(shallow_models or [])]
    context = run_context(prepared.metadata, profile, pipeline_run_id)
    with failure_ends(context["parent_run_id"]), tempfile.TemporaryDirectory() as models_dir:
        scores = evaluation.evaluate(
            prepared_dir=prepared.path, smatrix_path=similarity.path,
            models_dir=gather_models(models, models_dir), results_dir=results.path,
            runs=[(r["method"], int(r["bits"]), replicate_arg(r["replicate"]))
                  for r in [*deep_runs, *shallow_runs]],
            eval_params=cfg, features_path=gist.path if gist else None, seed=seed,
            **context,
        )  # fmt: skip
        summarize(context["parent_run_id"], results.path, None)  # report adds the report
    end_parent(context["parent_run_id"])  # the pipeline's last tracked step
    for name, value in kfp_metrics(scores, cfg["n"]).items():
        metrics.log_metric(name, value)
