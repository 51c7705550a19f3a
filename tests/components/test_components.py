"""Every Kubeflow component's Python function, called directly on tiny data in the upstream
format: the chain prepare -> tree -> smatrix -> features -> start -> train/baseline (each fit of
the plan) -> evaluate -> report, with local artifacts standing in for Kubeflow's."""

from __future__ import annotations

import gzip
import importlib
import json
import shutil
import socket
import time
from pathlib import Path
from typing import Any

import mlflow
import numpy as np
import pytest
from kfp import dsl

from shdh.kubeflow import branch_runs, pipeline_arguments
from shdh.tracking import mlflow_runs as tracking
from tests.conftest import write_fashion_mnist_raw
from tests.pipelines.front_doors import smoke_settings

pytestmark = pytest.mark.slow
COMPONENTS = (
    "prepare",
    "tree",
    "smatrix",
    "features",
    "start",
    "train",
    "baseline",
    "evaluate",
    "report",
    "register",
)


def component(name: str, n_fits: int = 3):
    module = importlib.import_module(f"components.{name}")
    if name == "evaluate":  # made for the plan: one model input per fit, and the GIST features
        return module.evaluate_for(n_fits, gist=True)
    return getattr(module, name)


def start_settings(args: dict) -> dict:
    """The start component's settings inputs: the seed and every section, as the DAG passes."""
    return {k: v for k, v in args.items() if k != "profile"}


def artifact(kind, path: Path, metadata: dict | None = None):
    return kind(name=path.name, uri=str(path), metadata=dict(metadata or {}))


def gzip_mirror(raw: Path, mirror: Path) -> Path:
    """The raw IDX files as a mirror holds them: NAME.gz."""
    mirror.mkdir(parents=True)
    for path in raw.iterdir():
        (mirror / f"{path.name}.gz").write_bytes(gzip.compress(path.read_bytes()))
    return mirror


def fit_inputs(tmp: Path, params: dict) -> tuple[Any, Any]:
    """The prepared dataset and the S-matrix of `params`, made by the prepare, tree and smatrix
    components in tmp, as a fit task receives them."""
    args = pipeline_arguments(params)
    prepared = artifact(dsl.Dataset, tmp / "prepared")
    component("prepare").python_func(data=args["data"], seed=0, prepared=prepared)
    prepared = artifact(dsl.Dataset, tmp / "prepared", prepared.metadata)
    labels = artifact(dsl.Dataset, tmp / "labels")
    component("tree").python_func(prepared=prepared, settings=args["tree"], labels=labels)
    similarity = artifact(dsl.Dataset, tmp / "similarity")
    component("smatrix").python_func(
        prepared=prepared, labels=labels, settings=args["smatrix"], seed=0, similarity=similarity
    )
    return prepared, similarity


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """Run every component function once, in pipeline order; keep every artifact."""
    tmp = tmp_path_factory.mktemp("components")
    mirror = gzip_mirror(write_fashion_mnist_raw(tmp / "raw"), tmp / "mirror")
    params = smoke_settings()
    params["data"].update(sources=[str(mirror)], verify=False, max_items=None)
    params["train"].update(methods=["shdh"], epochs=1)
    params["baselines"].update(methods=["itq", "kmh"])
    args = pipeline_arguments(params)
    names = ("prepared", "labels", "similarity", "gist", "results", "metrics", "document")
    art = {name: tmp / "artifacts" / name for name in names}
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    tracked = {"seed": 0, "profile": "smoke", "pipeline_run_id": "kfp-run-1"}
    out = {"uri": uri, "tmp": tmp, "args": args}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        prepared = artifact(dsl.Dataset, art["prepared"])
        component("prepare").python_func(data=args["data"], seed=0, prepared=prepared)
        prepared = artifact(dsl.Dataset, art["prepared"], prepared.metadata)  # as an input
        labels = artifact(dsl.Dataset, art["labels"])
        component("tree").python_func(prepared=prepared, settings=args["tree"], labels=labels)
        similarity = artifact(dsl.Dataset, art["similarity"])
        component("smatrix").python_func(
            prepared=prepared,
            labels=labels,
            settings=args["smatrix"],
            seed=0,
            similarity=similarity,
        )
        gist = artifact(dsl.Dataset, art["gist"])
        component("features").python_func(prepared=prepared, settings=args["features"], gist=gist)
        runs = {  # the plan the pipeline is built from
            kind: branch_runs(params["train"], params["baselines"], kind)
            for kind in ("deep", "shallow")
        }
        parent = component("start").python_func(
            prepared=prepared, profile="smoke", pipeline_run_id="kfp-run-1", **start_settings(args)
        )
        models = {}
        for kind, name in (("deep", "train"), ("shallow", "baseline")):
            for run in runs[kind]:
                model = artifact(dsl.Model, tmp / "artifacts" / f"{name}-{run['method']}")
                extra = {"gist": gist} if kind == "shallow" else {}
                component(name).python_func(
                    prepared=prepared,
                    similarity=similarity,
                    method=run["method"],
                    bits=run["bits"],
                    own_seed=run["own_seed"],
                    settings=args["train" if kind == "deep" else "baselines"],
                    model=model,
                    **extra,
                    **tracked,
                )
                models.setdefault(kind, []).append(
                    artifact(dsl.Model, Path(model.path), model.metadata)
                )
        results = artifact(dsl.Dataset, art["results"])
        metrics = artifact(dsl.Metrics, art["metrics"])
        fitted = [*models["deep"], *models["shallow"]]
        component("evaluate", len(fitted)).python_func(
            prepared=prepared,
            similarity=similarity,
            deep_runs=runs["deep"],
            shallow_runs=runs["shallow"],
            settings=args["evaluate"],
            results=results,
            metrics=metrics,
            gist=gist,
            **{f"fit_{i}": model for i, model in enumerate(fitted)},
            **tracked,
        )
        document = artifact(dsl.Markdown, art["document"])
        component("report").python_func(
            prepared=prepared,
            results=results,
            settings=args["evaluate"],
            profile="smoke",
            pipeline_run_id="kfp-run-1",
            document=document,
        )
        registered = component("register").python_func(
            parent_run_id=parent, model_name="shdh-encoder", metric="ndcg_at_100", alias="champion"
        )
    out.update(
        prepared=prepared,
        runs=runs,
        parent=parent,
        models=models,
        metrics=metrics,
        results=Path(results.path),
        document=Path(document.path),
        mirror=mirror,
        registered=registered,
    )
    return out


@pytest.fixture
def client(chain, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", chain["uri"])
    mlflow.set_tracking_uri(chain["uri"])
    return mlflow.MlflowClient()


@pytest.mark.parametrize("name", COMPONENTS)
def test_every_component_runs_in_the_project_image_and_documents_its_io(name):
    from shdh.kfp.components.image import IMAGE

    comp = component(name)
    spec = comp.component_spec
    assert spec.implementation.container.image == IMAGE
    # No pip install at start: the project image has kfp and shdh.
    assert "pip install" not in " ".join(spec.implementation.container.command or [])
    doc = comp.python_func.__doc__
    names = [*spec.inputs, *(spec.outputs or {})]
    assert names, name
    for io_name in names:
        label = "Output" if io_name == "Output" else io_name
        assert f"{label}:" in doc, f"{name}: docstring does not name {io_name}"


def test_download_converts_and_hashes_the_raw_files_as_dvc_does(chain, tmp_path):
    from dvc_data.hashfile.hash_info import HashInfo
    from dvc_data.hashfile.meta import Meta
    from dvc_data.hashfile.tree import Tree

    from shdh.data.download import md5sum
    from shdh.steps.prepare import load_prepared

    prepared = chain["prepared"]
    ds, split = load_prepared(prepared.path)
    assert len(ds.ids) == 300 and len(split.query_idx) == 30
    assert prepared.metadata["dataset"] == "fashion-mnist-h"
    # DVC's own hash of a data/ folder holding the same four files.
    tree = Tree()
    for gz in sorted(chain["mirror"].iterdir()):
        path = tmp_path / "data" / "fashion-mnist" / gz.name.removesuffix(".gz")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(gzip.decompress(gz.read_bytes()))
        key = ("fashion-mnist", path.name)
        tree.add(key, Meta(size=path.stat().st_size), HashInfo("md5", md5sum(path)))
    tree.digest()
    assert prepared.metadata["dvc_data_md5"] == tree.hash_info.value
    assert tracking.dvc_dir_md5(tmp_path / "data") == tree.hash_info.value


def test_tree_smatrix_and_features_write_the_library_formats(chain):
    from shdh.steps.smatrix import load_smatrix
    from shdh.steps.tree import load_tree

    tmp = chain["tmp"] / "artifacts"
    label_tree, ancestors = load_tree(tmp / "labels")
    assert ancestors.shape == (300, label_tree.height)
    assert load_smatrix(tmp / "similarity").n_items == 300
    assert np.load(tmp / "gist").shape == (300, 512)


def test_the_plan_lists_the_runs_of_each_branch_as_dvc_yaml_expands_them(chain):
    assert chain["runs"]["deep"] == [{"method": "shdh", "bits": 16, "own_seed": -1}]
    assert chain["runs"]["shallow"] == [
        {"method": "itq", "bits": 16, "own_seed": -1},
        {"method": "kmh", "bits": 16, "own_seed": -1},
    ]
    train = json.loads(chain["args"]["train"])
    baselines = json.loads(chain["args"]["baselines"])
    assert branch_runs({**train, "seeds": [5, 6]}, baselines, "deep") == [
        {"method": "shdh", "bits": 16, "own_seed": 5},
        {"method": "shdh", "bits": 16, "own_seed": 6},
    ]
    with pytest.raises(ValueError, match="kind"):
        branch_runs(train, baselines, "both")


def test_evaluate_takes_one_model_input_per_fit_of_the_plan():
    """kfp passes a list of artifacts only out of a ParallelFor, so evaluate is made per plan:
    a Model input per fit, and the GIST features only where there are shallow fits."""
    from shdh.kfp.components.evaluate import evaluate_for

    deep_only = evaluate_for(2, gist=False).component_spec.inputs
    with_gist = evaluate_for(2, gist=True).component_spec.inputs
    assert {n: i.type for n, i in deep_only.items() if n.startswith("fit_")} == {
        "fit_0": "system.Model@0.0.1",
        "fit_1": "system.Model@0.0.1",
    }
    assert "gist" not in deep_only and with_gist["gist"].type == "system.Dataset@0.0.1"
    assert not any(i.optional for i in with_gist.values() if i.type.startswith("system."))
    with pytest.raises(ValueError, match="no fits"):
        evaluate_for(0, gist=False)


def test_train_and_baseline_outputs_are_fitted_models(chain):
    from shdh.hashers import load_hasher

    for kind, method in (("deep", "shdh"), ("shallow", "itq")):
        model = next(m for m in chain["models"][kind] if m.metadata["method"] == method)
        assert model.metadata["bits"] == 16
        path = Path(model.path)
        assert load_hasher(path / "hasher").n_bits == 16
        assert json.loads((path / "fit.json").read_text())["method"] == method
        assert not (path / "work").exists()  # the checkpoint went to MLflow, not the artifact


def test_evaluate_and_report_score_every_model_and_track_it(chain, client):
    scores = json.loads((chain["results"] / "metrics.json").read_text())
    assert set(scores) == {"shdh", "itq", "kmh", "random"}
    logged = chain["metrics"].metadata
    assert logged["shdh_16_ndcg_at_100"] == pytest.approx(scores["shdh"]["16"]["ndcg@100"])
    assert "itq_16_wr_at_100" in logged
    assert "| SHDH |" in chain["document"].read_text()
    parent = client.get_run(chain["parent"])
    assert parent.data.tags[tracking.PIPELINE_TAG] == "kfp-run-1"
    assert parent.data.tags["dvc_data_md5"] == chain["prepared"].metadata["dvc_data_md5"]
    children = client.search_runs(
        [parent.info.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{chain['parent']}'"
    )
    # named as their fits' folders and codes files (no `seeds` list: no seed in the name), and
    # tagged with the seed they used
    names = {f"{m}-16" for m in ("shdh", "itq", "kmh", "random")}
    assert {c.info.run_name for c in children} == names
    assert {c.data.tags["seed"] for c in children} == {"0"}
    assert parent.info.status == "FINISHED"  # closed by evaluate, the story on it
    assert "| shdh | 16 |" in parent.data.tags["mlflow.note.content"]
    assert parent.data.params["train.methods"] == '["shdh"]'
    # the report as a page with its figures embedded, beside its markdown
    assert [a.path for a in client.list_artifacts(chain["parent"], "report")] == [
        "report/report.html",
        "report/results.md",
    ]


def test_evaluate_refuses_two_models_of_the_same_run(chain, tmp_path):
    from shdh.kubeflow import gather_models

    model = chain["models"]["deep"][0]
    twin = tmp_path / "twin"
    shutil.copytree(model.path, twin)
    with pytest.raises(ValueError, match="shdh-16"):
        gather_models([model, artifact(dsl.Model, twin)], tmp_path / "models")


def test_models_of_several_seeds_are_laid_out_by_seed_for_evaluate(chain, tmp_path):
    from shdh.kubeflow import gather_models

    model = chain["models"]["deep"][0]
    twin = tmp_path / "twin"
    shutil.copytree(model.path, twin)
    record = json.loads((twin / "fit.json").read_text())
    (twin / "fit.json").write_text(json.dumps({**record, "own_seed": 7, "seed": 7}))
    root = gather_models([model, artifact(dsl.Model, twin)], tmp_path / "models")
    assert sorted(p.name for p in (root / "shdh").iterdir()) == ["shdh-16", "shdh-16-seed7"]
    assert (root / "shdh" / "shdh-16-seed7").resolve() == twin.resolve()


def test_start_fails_fast_naming_an_unreachable_tracking_server(chain, monkeypatch):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    uri = f"http://127.0.0.1:{port}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    started = time.monotonic()
    with pytest.raises(tracking.TrackingUnavailableError, match=uri):
        component("start").python_func(
            prepared=chain["prepared"],
            profile="smoke",
            pipeline_run_id="kfp-run-2",
            **start_settings(chain["args"]),
        )
    assert time.monotonic() - started < 30


def test_a_prepared_artifact_without_its_metadata_is_refused(chain, tmp_path):
    bare = artifact(dsl.Dataset, Path(chain["prepared"].path))
    with pytest.raises(ValueError, match="dvc_data_md5"):
        component("start").python_func(
            prepared=bare, profile="smoke", pipeline_run_id="x", **start_settings(chain["args"])
        )


def test_a_settings_parameter_that_is_not_json_is_named(chain, tmp_path):
    from shdh.settings.profiles import ConfigError

    labels = artifact(dsl.Dataset, tmp_path / "labels")
    with pytest.raises(ConfigError, match="'tree'"):
        component("tree").python_func(
            prepared=chain["prepared"], settings="{source: dataset", labels=labels
        )
    assert not Path(labels.path).exists()


def test_register_puts_the_best_encoder_under_its_alias(chain, client):
    assert chain["registered"] == "models:/shdh-encoder@champion"
    version = client.get_model_version_by_alias("shdh-encoder", "champion")
    shdh = client.get_run(version.run_id)
    assert shdh.info.run_name == "shdh-16"  # the only run with an encoder
    assert shdh.data.tags["mlflow.parentRunId"] == chain["parent"]
