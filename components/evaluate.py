"""evaluate: encode, rank and score every fitted method; metrics, codes files and plots."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Metrics, Model, Output

from components.image import IMAGE


@dsl.component(base_image=IMAGE, install_kfp_package=False)
def evaluate(
    prepared: Input[Dataset],
    similarity: Input[Dataset],
    deep_runs: list,
    shallow_runs: list,
    settings: str,
    seed: int,
    profile: str,
    pipeline_run_id: str,
    results: Output[Dataset],
    metrics: Output[Metrics],
    deep_models: Input[list[Model]] | None = None,
    shallow_models: Input[list[Model]] | None = None,
    gist: Input[Dataset] | None = None,
):
    """Score every model (shdh evaluate), log the metrics to each model's MLflow run, write the
    results table, scores and figures onto the pipeline's parent run and close it.

    Inputs:
        prepared: the dataset folder from `prepare` (the query/database split).
        similarity: the S-matrix from `smatrix` (the ancestors that define relevance).
        deep_runs: the deep {method, bits, own_seed} fits, from `plan`, in scoring order.
        shallow_runs: the shallow {method, bits, own_seed} fits, from `plan` (empty without
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
    from shdh.cpu_pin import pin_cpu

    pin_cpu()  # before numpy and torch load: the same bits on every CPU

    import tempfile

    from shdh.kubeflow import gather_models, kfp_metrics, own_seed_arg, run_context, section_arg
    from shdh.parent_run import summarize
    from shdh.plan import fit_plan
    from shdh.steps.score import score
    from shdh.tracking import end_parent, failure_ends

    cfg = {**section_arg(settings, "evaluate"), "report": None}  # the report step writes it
    models = [*(deep_models or []), *(shallow_models or [])]
    context = run_context(prepared.metadata, profile, pipeline_run_id)
    with failure_ends(context["parent_run_id"]), tempfile.TemporaryDirectory() as models_dir:
        root = gather_models(models, models_dir)
        fits = [
            fit_plan(
                None,
                r["method"],
                int(r["bits"]),
                own_seed_arg(r["own_seed"]),
                seed=seed,
                models_root=root,
            )
            for r in [*deep_runs, *shallow_runs]
        ]
        scores = score(
            fits,
            prepared_dir=prepared.path,
            smatrix_path=similarity.path,
            results_dir=results.path,
            eval_params=cfg,
            features_path=gist.path if gist else None,
            **context,
        )
        view = summarize(context["parent_run_id"], results.path, None)  # report adds the report
    end_parent(context["parent_run_id"])  # the pipeline's last tracked step
    print(f"the methods compared in the MLflow UI: {view}")
    for name, value in kfp_metrics(scores, cfg["n"]).items():
        metrics.log_metric(name, value)
