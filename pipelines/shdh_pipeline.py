"""The SHDH pipeline as a Kubeflow DAG, the same steps as dvc.yaml:

    prepare -> tree -> smatrix -> start (MLflow parent run)
      -> ParallelFor deep runs:    train    (SHDH and DPSH at each code length; GPU on a cluster)
      -> features -> ParallelFor shallow runs: baseline (on GIST features)
      -> evaluate (every model) -> report, register (the best encoder, by a metric, with an alias)

The parameters mirror params.yaml: seed, profile, and one JSON string per section (data, tree,
smatrix, features, train, baselines, evaluate), their defaults the values of the params the
pipeline is built from (params.yaml plus a profile: shdh.kubeflow.resolve_params).

The raw data's version is fixed when the pipeline is built for a cluster: the prepare step
gets the checkout's data.dvc and .dvc/config and pulls that version from the DVC remote
(shdh.data.dvc_pull; docs/cluster-data.md), so a new data version is a new pipeline version.

Each branch fans out over one list of {method, bits} from a `plan` task, not over nested loops
of methods and bits: Kubeflow (and kfp.local) collect the outputs of a single loop level only.
Whether the shallow branch exists is decided when the pipeline is built: a loop over an empty
list collects nothing that `evaluate` could be given, so `baselines.methods: []` leaves the
branch out (and a run's methods and bits lists must not be emptied at submit time).
"""

from pathlib import Path
from typing import Any, NamedTuple

# The components under other names: the pipeline's parameters take the sections' names.
from components.baseline import baseline as baseline_op
from components.evaluate import evaluate as evaluate_op
from components.features import features as features_op
from components.image import IMAGE, gpu_image
from components.plan import plan as plan_op
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
from shdh.kubeflow import branch_runs, pipeline_arguments, project_root
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
    each loop, and retries, a deadline and (on GPU settings) the GPU and the CUDA image on each
    train task, whose `train.device` follows (pipelines.cluster.train_device). kfp.local runs
    the pipeline built without settings.
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
        inputs: dict[str, Any] = {"deep_runs": [], "shallow_runs": []}
        if deep_runs:
            planned = step(plan_op(train=train, baselines=baselines, kind="deep"))
            with dsl.ParallelFor(planned.output, parallelism=cap("train")) as item:
                fit = train_op(
                    prepared=prepared,
                    similarity=similarity,
                    method=item.method,
                    bits=item.bits,
                    own_seed=item.own_seed,
                    settings=train,
                    **tracked,
                )
                step(fit.after(opened))
                if settings is not None:
                    apply_training(fit, settings, gpu_image(IMAGE))
            inputs.update(deep_runs=planned.output, deep_models=dsl.Collected(fit.outputs["model"]))
        if shallow_runs:
            gist = step(features_op(prepared=prepared, settings=features)).outputs["gist"]
            planned = step(plan_op(train=train, baselines=baselines, kind="shallow"))
            with dsl.ParallelFor(planned.output, parallelism=cap("baseline")) as item:
                fit = baseline_op(
                    prepared=prepared,
                    similarity=similarity,
                    gist=gist,
                    method=item.method,
                    bits=item.bits,
                    own_seed=item.own_seed,
                    settings=baselines,
                    **tracked,
                )
                step(fit.after(opened))
            inputs.update(
                shallow_runs=planned.output,
                gist=gist,
                shallow_models=dsl.Collected(fit.outputs["model"]),
            )
        scored = step(
            evaluate_op(
                prepared=prepared, similarity=similarity, settings=evaluate, **tracked, **inputs
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
