"""The SHDH pipeline as a Kubeflow DAG, the same steps as dvc.yaml:

    prepare -> tree -> smatrix -> start (MLflow parent run)
      -> train    one task per deep fit (SHDH and DPSH at each code length; GPU on a cluster)
      -> features -> baseline: one task per shallow fit (on GIST features)
      -> evaluate (every model) -> report, register (the best encoder, by a metric, with an alias)
      -> index (the database encoded by that encoder: the search index `shdh serve` loads)
      -> deploy (optional, on a cluster whose settings give deploy.service_url: the index copied
         to the search service's S3 prefix, and the service reloaded)

The parameters mirror params.yaml: seed, profile, and one JSON string per section (data, tree,
smatrix, features, train, baselines, evaluate), their defaults the values of the params the
pipeline is built from (params.yaml plus a profile: shdh.kubeflow.resolve_params).

The raw data's version is fixed when the pipeline is built for a cluster: the prepare step
gets the checkout's data.dvc and .dvc/config and pulls that version from the DVC remote
(shdh.steps.dvc_pull; docs/cluster-data.md), so a new data version is a new pipeline version.

The fits are unrolled when the pipeline is built, from the run plan of its params
(shdh.plan.all_methods: methods x bits x seeds, in scoring order): each is a task of its own, shown
by its fit's name (METHOD-BITS[-seedS]). KFP ignores the retries of a task inside a ParallelFor, and
collecting artifacts out of one (dsl.Collected) needs a recent backend; a task of the root DAG has
neither limit. So the fits a run makes are fixed at compile time: a run's train and baselines
parameters may change a fit's settings, not which fits there are (`shdh pipeline submit`
compiles from the same params it passes). A loop cap (train.parallelism, baseline.parallelism)
becomes chains: fit i starts after fit i - cap of its kind, so at most `cap` run at once.
"""

import json
from pathlib import Path
from typing import Any, NamedTuple

from kfp import compiler, dsl
from kfp.dsl import Dataset, Markdown

# The components under other names: the pipeline's parameters take the sections' names.
from shdh.kfp.components.baseline import baseline as baseline_op
from shdh.kfp.components.deploy_index import deploy as deploy_op
from shdh.kfp.components.evaluate import evaluate_for, fit_inputs
from shdh.kfp.components.features import features as features_op
from shdh.kfp.components.image import IMAGE, gpu_image
from shdh.kfp.components.index import index as index_op
from shdh.kfp.components.prepare import prepare as prepare_op
from shdh.kfp.components.register import register as register_op
from shdh.kfp.components.report import report as report_op
from shdh.kfp.components.smatrix import smatrix as smatrix_op
from shdh.kfp.components.start import start as start_op
from shdh.kfp.components.train import train as train_op
from shdh.kfp.components.trainjob import trainjob as trainjob_op
from shdh.kfp.components.tree import tree as tree_op
from shdh.kfp.pipelines.cluster import (
    CONFIG_MAP,
    MILVUS_SECRET,
    apply_resources,
    apply_retries,
    apply_training,
    train_device,
    trainjob_nodes,
    use_cluster_settings,
)
from shdh.kfp.pipelines.cluster_settings import ClusterSettings, Deploy
from shdh.kubeflow import branch_runs, cluster_data_version, fit_name, pipeline_arguments
from shdh.tracking.model_registry import DEFAULT_ALIAS, DEFAULT_METRIC, DEFAULT_MODEL_NAME

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
    plan = _Plan.of(params, settings)

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
        args = _Arguments(
            profile=profile,
            seed=seed,
            data=data,
            tree=tree,
            smatrix=smatrix,
            features=features,
            train=train,
            baselines=baselines,
            evaluate=evaluate,
            register_model=register_model,
            register_metric=register_metric,
            register_alias=register_alias,
        )
        return _Tasks(plan, args).outputs()

    return shdh_pipeline


class _Arguments(NamedTuple):
    """The pipeline's parameters inside its body: placeholders for a run's values."""

    profile: Any
    seed: Any
    data: Any
    tree: Any
    smatrix: Any
    features: Any
    train: Any
    baselines: Any
    evaluate: Any
    register_model: Any
    register_metric: Any
    register_alias: Any


class _Plan(NamedTuple):
    """What is fixed when the pipeline is built: the fits, the data version and the cluster."""

    deep_runs: list[dict]
    shallow_runs: list[dict]
    data_version: str
    settings: ClusterSettings | None
    nodes: dict[str, Any] | None  # a fit's TrainJob nodes; None: one process, the train task
    index: dict[str, Any]  # the index task's engine and its settings (params.yaml's index)

    @classmethod
    def of(cls, params: dict[str, Any], settings: ClusterSettings | None) -> "_Plan":
        # The raw data's version: what data.dvc records, pulled from the remote of .dvc/config.
        # A local run downloads instead: its store is not the cluster's.
        data_version = cluster_data_version(params) if settings is not None else ""
        deep_runs = branch_runs(params["train"], params["baselines"], "deep")
        shallow_runs = branch_runs(params["train"], params["baselines"], "shallow")
        if not deep_runs and not shallow_runs:
            raise ValueError("params: train and baselines list no (method, bits) to run")
        nodes = trainjob_nodes(params["train"], settings, IMAGE, gpu_image(IMAGE))
        return cls(deep_runs, shallow_runs, data_version, settings, nodes, _index(params))

    def cap(self, loop: str) -> int | None:
        """How many fits of a loop's kind may run at once (None: no cap)."""
        return self.settings.parallelism[loop] if self.settings is not None else None


class _Tasks:
    """The tasks of the pipeline's body, made in the DAG's order (KFP numbers the tasks of one
    component, train, train-2, ..., in the order they are made), each kept so that the cluster
    settings reach every one at the end."""

    def __init__(self, plan: _Plan, args: _Arguments) -> None:
        self.plan, self.args = plan, args
        self.run_id = dsl.PIPELINE_JOB_ID_PLACEHOLDER
        self.tracked = {"seed": args.seed, "profile": args.profile, "pipeline_run_id": self.run_id}
        self.made: list[Any] = []

    def add(self, task: Any) -> Any:
        self.made.append(task)
        return task

    def outputs(self) -> Outputs:
        """The whole DAG: the data steps, the fits, scoring, the report and registration."""
        upstream = _data_steps(self)
        models, inputs = _Fits(self, upstream).made()
        scored, written = _scoring(self, upstream, models, inputs)
        settings = self.plan.settings
        if settings is not None:
            for task in self.made:
                apply_resources(use_cluster_settings(task), settings)
        return Outputs(results=scored.outputs["results"], report=written.outputs["document"])


class _Upstream(NamedTuple):
    """What the fits and the scoring take from the data steps."""

    prepared: Any
    similarity: Any
    opened: Any  # the start task: its output is the MLflow parent run's id
    labels: Any  # the tree step's folder (a Milvus collection keeps the label tree)


def _data_steps(tasks: _Tasks) -> _Upstream:
    """prepare -> tree -> smatrix, and the MLflow parent run (start)."""
    args = tasks.args
    fetched = prepare_op(data=args.data, seed=args.seed, data_version=tasks.plan.data_version)
    prepared = tasks.add(fetched).outputs["prepared"]
    labels = tasks.add(tree_op(prepared=prepared, settings=args.tree)).outputs["labels"]
    similarity = tasks.add(
        smatrix_op(prepared=prepared, labels=labels, settings=args.smatrix, seed=args.seed)
    ).outputs["similarity"]
    opened = tasks.add(
        start_op(
            prepared=prepared,
            profile=args.profile,
            pipeline_run_id=tasks.run_id,
            seed=args.seed,
            data=args.data,
            tree=args.tree,
            smatrix=args.smatrix,
            features=args.features,
            train=args.train,
            baselines=args.baselines,
            evaluate=args.evaluate,
        )
    )
    return _Upstream(prepared, similarity, opened, labels)


class _Fits:
    """The fit tasks: the deep fits, then (with shallow fits) the GIST features and the shallow
    fits, one task per planned fit."""

    def __init__(self, tasks: _Tasks, upstream: _Upstream) -> None:
        self.tasks, self.upstream = tasks, upstream

    def made(self) -> tuple[list[Any], dict[str, Any]]:
        """The fit tasks in scoring order, and the evaluate step's inputs besides the models."""
        plan = self.tasks.plan
        models = self._unrolled(plan.deep_runs, "train", self._deep)
        inputs: dict[str, Any] = {}
        if plan.shallow_runs:
            features = features_op(
                prepared=self.upstream.prepared, settings=self.tasks.args.features
            )
            self.gist = inputs["gist"] = self.tasks.add(features).outputs["gist"]
            models += self._unrolled(plan.shallow_runs, "baseline", self._shallow)
        return models, inputs

    def _unrolled(self, runs: list[dict], loop: str, make: Any) -> list[Any]:
        """One task per planned fit, after the parent run is open, at most cap(loop) at once:
        the i-th also waits for the (i - cap)-th."""
        fits: list[Any] = []
        limit = self.tasks.plan.cap(loop)
        for i, run in enumerate(runs):
            fit = make(method=run["method"], bits=run["bits"], own_seed=run["own_seed"])
            fit.set_display_name(fit_name(run)).after(self.upstream.opened)
            if limit and i >= limit:
                fit.after(fits[i - limit])
            fits.append(self.tasks.add(fit))
        return fits

    def _deep(self, **run: Any) -> Any:
        nodes, settings = self.tasks.plan.nodes, self.tasks.plan.settings
        if nodes is not None:  # a TrainJob: the task launches it and waits, with no GPU
            job = trainjob_op(
                prepared=self.upstream.prepared,
                similarity=self.upstream.similarity,
                settings=self.tasks.args.train,
                nodes=json.dumps(nodes, sort_keys=True),
                **run,
                **self.tasks.tracked,
            )
            return job if settings is None else apply_retries(job, settings)
        fit = train_op(
            prepared=self.upstream.prepared,
            similarity=self.upstream.similarity,
            settings=self.tasks.args.train,
            **run,
            **self.tasks.tracked,
        )
        if settings is not None:
            apply_training(fit, settings, gpu_image(IMAGE))
        return fit

    def _shallow(self, **run: Any) -> Any:
        return baseline_op(
            prepared=self.upstream.prepared,
            similarity=self.upstream.similarity,
            gist=self.gist,
            settings=self.tasks.args.baselines,
            **run,
            **self.tasks.tracked,
        )


def _scoring(
    tasks: _Tasks, upstream: _Upstream, models: list[Any], inputs: dict[str, Any]
) -> tuple[Any, Any]:
    """evaluate (every model) -> report, and register after evaluate, then the search index,
    where there is an encoder to register: the evaluate and report tasks."""
    args, plan = tasks.args, tasks.plan
    outputs = [m.outputs["model"] for m in models]
    inputs.update(zip(fit_inputs(len(models)), outputs, strict=True))
    evaluate_op = evaluate_for(len(models), gist=bool(plan.shallow_runs))
    scored = tasks.add(
        evaluate_op(
            prepared=upstream.prepared,
            similarity=upstream.similarity,
            deep_runs=plan.deep_runs,
            shallow_runs=plan.shallow_runs,
            settings=args.evaluate,
            **tasks.tracked,
            **inputs,
        )
    )
    written = tasks.add(
        report_op(
            prepared=upstream.prepared,
            results=scored.outputs["results"],
            settings=args.evaluate,
            profile=args.profile,
            pipeline_run_id=tasks.run_id,
        )
    )
    if plan.deep_runs:  # only the deep methods log an encoder that can be registered
        registered = tasks.add(
            register_op(
                parent_run_id=upstream.opened.output,
                model_name=args.register_model,
                metric=args.register_metric,
                alias=args.register_alias,
            ).after(scored)
        )
        indexed = _search_index(tasks, upstream, registered)
        if plan.settings is not None and plan.settings.deploy is not None:
            _deploy(tasks, indexed, plan.settings.deploy)
    return scored, written


def _search_index(tasks: _Tasks, upstream: _Upstream, registered: Any) -> Any:
    """The database encoded by the version the register task has just registered (by its
    alias), as the search index artifact (the pipeline root's object store, S3).

    Never from KFP's cache: its inputs (the data, the model's name and alias) are the same in
    every run on the same data, while the version behind the alias is not, and a cached index
    of the last champion would be refused by the service beside the new one."""
    args, engine = tasks.args, tasks.plan.index
    made = index_op(
        prepared=upstream.prepared,
        similarity=upstream.similarity,
        labels=upstream.labels,
        model_name=args.register_model,
        alias=args.register_alias,
        **engine,
    )
    if engine["engine"] == "milvus" and tasks.plan.settings is not None:
        from kfp import kubernetes

        # where the cluster's Milvus is, and the stack's Milvus user (k8s/components/milvus)
        kubernetes.use_config_map_as_env(made, CONFIG_MAP, {"SHDH_MILVUS_URI": "SHDH_MILVUS_URI"})
        kubernetes.use_secret_as_env(made, MILVUS_SECRET, {"MILVUS_TOKEN": "SHDH_MILVUS_TOKEN"})
    return tasks.add(made.after(registered).set_caching_options(False))


def _deploy(tasks: _Tasks, indexed: Any, deploy: Deploy) -> Any:
    """The index copied to the search service's S3 prefix (SHDH_SEARCH_INDEX_URL of shdh-config,
    the one its Deployment reads), then the service reloaded with its token (SHDH_SERVE_TOKEN,
    from the Secret deploy.token_secret names)."""
    from kfp import kubernetes

    made = deploy_op(search_index=indexed.outputs["search_index"], service_url=deploy.service_url)
    kubernetes.use_config_map_as_env(
        made, CONFIG_MAP, {"SHDH_SEARCH_INDEX_URL": "SHDH_SEARCH_INDEX_URL"}
    )
    kubernetes.use_secret_as_env(made, deploy.token_secret, {"token": "SHDH_SERVE_TOKEN"})
    return tasks.add(made.set_caching_options(False))  # its work is the reload: never skipped


def _index(params: dict[str, Any]) -> dict[str, Any]:
    """The index task's engine arguments, from params.yaml's index section (its defaults where
    a key is left out): fixed when the pipeline is built, as the index section is no pipeline
    parameter."""
    from shdh.settings.sections import IndexSettings

    section = IndexSettings(**(params.get("index") or {}))
    return {
        "engine": section.engine,
        "milvus_uri": section.milvus_uri,
        "milvus_collection": section.milvus_collection or "",
        "milvus_index": section.milvus_index,
        "milvus_nlist": section.milvus_nlist,
    }


def compile_pipeline(
    params: dict[str, Any], out: str | Path, *, settings: ClusterSettings | None = None
) -> Path:
    """Write the pipeline YAML (IR) for `params`, for a cluster with `settings` (None: for
    kfp.local), written atomically."""
    from shdh.runtime.atomic import atomic_path

    out = Path(out)
    pipeline = build_pipeline(params, settings=settings)
    with atomic_path(out, suffix=".yaml") as tmp:
        compiler.Compiler().compile(pipeline, str(tmp))
    return out
