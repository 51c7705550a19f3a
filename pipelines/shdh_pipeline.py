"""The SHDH pipeline as a Kubeflow DAG, the same steps as dvc.yaml:

    prepare -> tree -> smatrix -> start (MLflow parent run)
      -> train    one task per deep fit (SHDH and DPSH at each code length; GPU on a cluster)
      -> features -> baseline: one task per shallow fit (on GIST features)
      -> evaluate (every model) -> report, register (the best encoder, by a metric, with an alias)

The parameters mirror params.yaml: seed, profile, and one JSON string per section (data, tree,
smatrix, features, train, baselines, evaluate), their defaults the values of the params the
pipeline is built from (params.yaml plus a profile: shdh.kubeflow.resolve_params).

The raw data's version is fixed when the pipeline is built for a cluster: the prepare step
gets the checkout's data.dvc and .dvc/config and pulls that version from the DVC remote
(shdh.data.dvc_pull; docs/cluster-data.md), so a new data version is a new pipeline version.

The fits are unrolled when the pipeline is built, from the run plan of its params (shdh.plan:
methods x bits x seeds, in scoring order): each is a task of its own, shown by its fit's name
(METHOD-BITS[-seedS]). KFP ignores the retries of a task inside a ParallelFor, and collecting
artifacts out of one (dsl.Collected) needs a recent backend; a task of the root DAG has neither
limit. So the fits a run makes are fixed at compile time: a run's train and baselines
parameters may change a fit's settings, not which fits there are (`shdh pipeline submit`
compiles from the same params it passes). A loop cap (train.parallelism, baseline.parallelism)
becomes chains: fit i starts after fit i - cap of its kind, so at most `cap` run at once.
"""

from pathlib import Path
from typing import Any, NamedTuple

# The components under other names: the pipeline's parameters take the sections' names.
from components.baseline import baseline as baseline_op
from components.evaluate import evaluate_for, fit_inputs
from components.features import features as features_op
from components.image import IMAGE, gpu_image
from components.prepare import prepare as prepare_op
from components.register import register as register_op
from components.report import report as report_op
from components.smatrix import smatrix as smatrix_op
from components.start import start as start_op
from components.train import train as train_op
from components.tree import tree as tree_op
from kfp import compiler, dsl
from kfp.dsl import Dataset, Markdown

from pipelines.cluster import (
    apply_resources,
    apply_training,
    train_device,
    use_cluster_settings,
)
from pipelines.settings import ClusterSettings
from shdh.data import dvc_pull
from shdh.kubeflow import branch_runs, fit_name, pipeline_arguments, project_root
from shdh.registry import DEFAULT_ALIAS, DEFAULT_METRIC, DEFAULT_MODEL_NAME

PIPELINE_NAME = "shdh"
DESCRIPTION = (
    "Supervised Hierarchical Deep Hashing (arXiv 1704.02088): SHDH and DPSH at each code length "
    "and the shallow baselines on GIST, scored by ACG, DCG, NDCG and weighted recall"
)


class Outputs(NamedTuple):
    results: Dataset
    report: Markdown


def build_pipeline(params: dict[str, Any], *, settings: ClusterSettings | None = None) -> Any:
    """The pipeline (a kfp GraphComponent) with `params` as its parameters' defaults.

    With a cluster's `settings`, what only a Kubernetes cluster understands is added:
    environment from the ConfigMap and Secret and CPU and memory bounds on every task, a cap on
    how many fits of each kind run at once, and retries, a deadline and (on GPU settings) the
    GPU and the CUDA image on each train task, whose `train.device` follows
    (pipelines.cluster.train_device). kfp.local runs the pipeline built without settings.
    """
    if settings is not None:
        params = train_device(params, settings)
    defaults = pipeline_arguments(params)
    # The raw data's version: what data.dvc records, pulled from the remote of .dvc/config.
    # A local run downloads instead: its store is not the cluster's.
    data_version = dvc_pull.data_version(project_root()) if settings is not None else ""
    deep_runs = branch_runs(params["train"], params["baselines"], "deep")
    shallow_runs = branch_runs(params["train"], params["baselines"], "shallow")
    if not deep_runs and not shallow_runs:
        raise ValueError("params: train and baselines list no (method, bits) to run")
    tasks: list[Any] = []

    def step(task: Any) -> Any:
        tasks.append(task)
        return task

    def cap(loop: str) -> int | None:
        return settings.parallelism[loop] if settings is not None else None

    @dsl.pipeline(name=PIPELINE_NAME, description=DESCRIPTION)
    def shdh_pipeline(
        profile: str = defaults["profile"],
        seed: int = defaults["seed"],
        data: str = defaults["data"],
        tree: str = defaults["tree"],
        smatrix: str = defaults["smatrix"],
        features: str = defaults["features"],
        train: str = defaults["train"],
        baselines: str = defaults["baselines"],
        evaluate: str = defaults["evaluate"],
        register_model: str = DEFAULT_MODEL_NAME,
        register_metric: str = DEFAULT_METRIC,
        register_alias: str = DEFAULT_ALIAS,
    ) -> Outputs:
        run_id = dsl.PIPELINE_JOB_ID_PLACEHOLDER
        tracked = {"seed": seed, "profile": profile, "pipeline_run_id": run_id}
        fetched = prepare_op(data=data, seed=seed, data_version=data_version)
        prepared = step(fetched).outputs["prepared"]
        labels = step(tree_op(prepared=prepared, settings=tree)).outputs["labels"]
        similarity = step(
            smatrix_op(prepared=prepared, labels=labels, settings=smatrix, seed=seed)
        ).outputs["similarity"]
        opened = step(
            start_op(
                prepared=prepared,
                profile=profile,
                pipeline_run_id=run_id,
                seed=seed,
                data=data,
                tree=tree,
                smatrix=smatrix,
                features=features,
                train=train,
                baselines=baselines,
                evaluate=evaluate,
            )
        )

        def unrolled(runs: list[dict], loop: str, make: Any) -> list[Any]:
            """One task per planned fit, after the parent run is open, at most cap(loop) at
            once: the i-th also waits for the (i - cap)-th."""
            fits: list[Any] = []
            limit = cap(loop)
            for i, run in enumerate(runs):
                fit = make(method=run["method"], bits=run["bits"], own_seed=run["own_seed"])
                fit.set_display_name(fit_name(run)).after(opened)
                if limit and i >= limit:
                    fit.after(fits[i - limit])
                fits.append(step(fit))
            return fits

        def deep_fit(**run: Any) -> Any:
            fit = train_op(
                prepared=prepared, similarity=similarity, settings=train, **run, **tracked
            )
            if settings is not None:
                apply_training(fit, settings, gpu_image(IMAGE))
            return fit

        models = unrolled(deep_runs, "train", deep_fit)
        inputs: dict[str, Any] = {}
        if shallow_runs:
            gist = step(features_op(prepared=prepared, settings=features)).outputs["gist"]
            inputs["gist"] = gist

            def shallow_fit(**run: Any) -> Any:
                return baseline_op(
                    prepared=prepared,
                    similarity=similarity,
                    gist=gist,
                    settings=baselines,
                    **run,
                    **tracked,
                )

            models += unrolled(shallow_runs, "baseline", shallow_fit)
        outputs = [m.outputs["model"] for m in models]
        inputs.update(zip(fit_inputs(len(models)), outputs, strict=True))
        evaluate_op = evaluate_for(len(models), gist=bool(shallow_runs))
        scored = step(
            evaluate_op(
                prepared=prepared,
                similarity=similarity,
                deep_runs=deep_runs,
                shallow_runs=shallow_runs,
                settings=evaluate,
                **tracked,
                **inputs,
            )
        )
        written = step(
            report_op(
                prepared=prepared,
                results=scored.outputs["results"],
                settings=evaluate,
                profile=profile,
                pipeline_run_id=run_id,
            )
        )
        if deep_runs:  # only the deep methods log an encoder that can be registered
            step(
                register_op(
                    parent_run_id=opened.output,
                    model_name=register_model,
                    metric=register_metric,
                    alias=register_alias,
                ).after(scored)
            )
        if settings is not None:
            for task in tasks:
                apply_resources(use_cluster_settings(task), settings)
        return Outputs(results=scored.outputs["results"], report=written.outputs["document"])

    return shdh_pipeline


def compile_pipeline(
    params: dict[str, Any], out: str | Path, *, settings: ClusterSettings | None = None
) -> Path:
    """Write the pipeline YAML (IR) for `params`, for a cluster with `settings` (None: for
    kfp.local), written atomically."""
    from shdh.atomic import atomic_path

    out = Path(out)
    pipeline = build_pipeline(params, settings=settings)
    with atomic_path(out, suffix=".yaml") as tmp:
        compiler.Compiler().compile(pipeline, str(tmp))
    return out
