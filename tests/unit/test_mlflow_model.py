"""The deep encoders as MLflow models: logged at training time, served by `mlflow models predict`
with the codes the pipeline computed, and the best one registered in the Model Registry."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import mlflow
import numpy as np
import pytest

from shdh.core.codes_file import load_codes
from shdh.tracking import encoder_model, mlflow_runs, model_registry
from tests.commands.test_steps import run_steps, smoke_params

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """SHDH at 16 bits on tiny data, tracked in its own SQLite store, then evaluated."""
    from tests.conftest import write_fashion_mnist_raw

    tmp = tmp_path_factory.mktemp("encoder")
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", uri)
        raw = write_fashion_mnist_raw(tmp / "raw")
        params = smoke_params(
            tmp,
            raw,
            train={"methods": ["shdh"], "epochs": 1},
            baselines={"methods": []},
            evaluate={"report": str(tmp / "results.md")},
        )
        run_steps(params, ["prepare"], ["tree"], ["smatrix"])
        run_steps(params, ["train", "--method", "shdh", "--bits", "16", "--no-progress"])
        run_steps(params, ["evaluate"])
    ref = tmp / "models" / "shdh" / "shdh-16" / "mlflow_run.json"
    ref = json.loads(ref.read_text())
    return {"tmp": tmp, "uri": uri, "run_id": ref["run_id"], "parent_id": ref["parent_run_id"]}


@pytest.fixture
def store(trained, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", trained["uri"])
    mlflow.set_tracking_uri(trained["uri"])
    return trained


def query_images(tmp: Path) -> np.ndarray:
    from shdh.steps.prepare import load_prepared

    ds, split = load_prepared(tmp / "prepared")
    return np.asarray(ds.images[split.query_idx])


def test_training_logs_the_encoder_with_signature_and_example(store):
    run = mlflow.MlflowClient().get_run(store["run_id"])
    uri = run.data.tags[mlflow_runs.MODEL_URI_TAG]
    info = mlflow.models.get_model_info(uri)
    images = query_images(store["tmp"])
    inputs = info.signature.inputs.inputs[0]
    outputs = info.signature.outputs.inputs[0]
    assert inputs.type == np.dtype(np.uint8) and inputs.shape == (-1, *images.shape[1:])
    assert outputs.type == np.dtype(np.uint8) and outputs.shape == (-1, 2)  # 16 bits, packed
    assert info.saved_input_example_info is not None
    assert info.metadata["method"] == "shdh" and info.metadata["n_bits"] == 16
    # In-process: the pyfunc gives the codes of the saved hasher, packed.
    model = mlflow.pyfunc.load_model(uri)
    codes = load_codes(store["tmp"] / "results" / "codes" / "shdh-16.npz")
    np.testing.assert_array_equal(model.predict(images), codes.query_codes)
    with pytest.raises(Exception, match="uint8"):
        model.predict(images.astype(np.float32))


def test_mlflow_models_predict_returns_the_pipeline_codes(store, tmp_path):
    """The CLI, in its own process: the query codes that `shdh evaluate` wrote, bit for bit."""
    uri = mlflow.MlflowClient().get_run(store["run_id"]).data.tags[mlflow_runs.MODEL_URI_TAG]
    images = query_images(store["tmp"])
    (tmp_path / "input.json").write_text(json.dumps({"inputs": images.tolist()}))
    mlflow_cli = Path(sys.executable).parent / "mlflow"
    proc = subprocess.run(
        [
            str(mlflow_cli),
            "models",
            "predict",
            "-m",
            uri,
            "-i",
            str(tmp_path / "input.json"),
            "-t",
            "json",
            "-o",
            str(tmp_path / "out.json"),
            "--env-manager",
            "local",
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    predicted = np.asarray(json.loads((tmp_path / "out.json").read_text())["predictions"])
    expected = load_codes(store["tmp"] / "results" / "codes" / "shdh-16.npz").query_codes
    assert predicted.dtype.kind in "iu"
    np.testing.assert_array_equal(predicted.astype(np.uint8), expected)


def test_register_best_picks_the_highest_metric_then_the_name_and_loads_by_alias(store):
    """Three children of one pipeline run: two tie on NDCG, the name breaks the tie; the alias
    then loads the winner, and a second registration moves the alias to the new version."""
    hasher_dir = store["tmp"] / "models" / "shdh" / "shdh-16" / "hasher"
    example = query_images(store["tmp"])[:2]
    with mlflow_runs.run(run_name="pipeline-x") as parent:
        parent_id = parent.info.run_id
    children = {}
    for name, ndcg in (("shdh-32", 0.7), ("dpsh-16", 0.9), ("shdh-16", 0.9)):
        with mlflow_runs.run(run_name=name, parent_run_id=parent_id) as child:
            encoder_model.log_encoder(hasher_dir, example)
            mlflow_runs.log_metrics({"ndcg@100": ndcg, "wr@100": 1 - ndcg})
            children[name] = child.info.run_id
    with mlflow_runs.run(run_name="itq-16", parent_run_id=parent_id):
        mlflow_runs.log_metrics({"ndcg@100": 1.0})  # no encoder: a shallow baseline cannot win
    done = model_registry.register_best(parent_id, "shdh-encoder", alias="champion")
    assert (done.name, done.version, done.run_id) == ("shdh-encoder", "1", children["dpsh-16"])
    assert done.metric == "ndcg_at_100" and done.value == pytest.approx(0.9)
    client = mlflow.MlflowClient()
    champion = client.get_model_version_by_alias("shdh-encoder", "champion")
    assert str(champion.version) == "1"
    # Why it won, first: the registry's table shows the start of a description only.
    assert champion.description.startswith("ndcg_at_100 = 0.9000: dpsh-16 (run ")
    assert f"pipeline run pipeline-x ({parent_id}) by ndcg_at_100." in champion.description
    model = model_registry.load_by_alias("shdh-encoder", "champion")
    assert model_registry.check_loaded(model) == (2, 2)  # 16 bits pack into 2 bytes
    # as the pipeline's own steps load it, without MLflow's requirements check: the same model
    unchecked = model_registry.load_by_alias("shdh-encoder", "champion", check_environment=False)
    assert unchecked.metadata.run_id == model.metadata.run_id == children["dpsh-16"]
    assert model_registry.check_loaded(unchecked) == (2, 2)
    # Another metric picks another run; the alias follows the newest registration.
    again = model_registry.register_best(
        parent_id, "shdh-encoder", metric="wr@100", alias="champion"
    )
    assert again.run_id == children["shdh-32"] and again.version == "2"
    assert str(client.get_model_version_by_alias("shdh-encoder", "champion").version) == "2"
    # The first metric's winner again, under another alias: its version, not a third one.
    best = model_registry.register_best(parent_id, "shdh-encoder", alias="best-ndcg")
    assert (best.run_id, best.version) == (children["dpsh-16"], "1")
    assert str(client.get_model_version_by_alias("shdh-encoder", "best-ndcg").version) == "1"
    assert str(client.get_model_version_by_alias("shdh-encoder", "champion").version) == "2"
    versions = client.search_model_versions("name='shdh-encoder'")
    assert sorted(int(v.version) for v in versions) == [1, 2]


def test_register_best_without_candidates_names_the_run_and_the_metrics(store):
    with mlflow_runs.run(run_name="empty") as parent:
        parent_id = parent.info.run_id
    with pytest.raises(ValueError, match=parent_id):
        model_registry.register_best(parent_id, "nothing")
    with pytest.raises(ValueError, match="ndcg_at_100"):  # what the real run does have
        model_registry.register_best(store["parent_id"], "nothing", metric="map@100")


def test_register_names_a_run_id_that_is_not_in_the_store(caplog):
    from shdh.cli import main

    assert main(["register", "--run-id", "nonexist"]) == 1
    assert "MLflow run nonexist: no such run at sqlite:///" in caplog.text
    assert "give --run-id a pipeline run's id from this store" in caplog.text
    assert "Traceback" not in caplog.text


def test_defining_the_encoder_class_asks_for_no_type_hints():
    """MLflow warns, in raw terminal colours, about a predict without type hints each time a
    process defines the class (register, index, serve); the ndarray hint it takes no schema
    from silences it. A process of its own: this one may have defined the class already."""
    script = (
        "import warnings\n"
        "with warnings.catch_warnings(record=True) as caught:\n"
        "    warnings.simplefilter('always')\n"
        "    from shdh.tracking.encoder_model import encoder_model_class\n"
        "    encoder_model_class()\n"
        "print(sum('type hints' in str(w.message) for w in caught))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "0"
