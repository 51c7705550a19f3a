"""`shdh pipeline compile`: the DAG's tasks and edges, its parameters, the cluster settings (GPU,
ConfigMap, Secret) and never a credential in the YAML."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from shdh.cli import main
from shdh.stages.pipeline import pipeline_arguments, resolve_params
from tests.conftest import REPO

SECRET_VALUE = "wJalrXUtnFEMI-not-a-real-secret-K7MDENG"
ACCESS_KEY_VALUE = "AKIAIOSFODNN7EXAMPLE"


def compile_with(tmp_path: Path, monkeypatch, *args: str) -> tuple[dict, dict, str]:
    """Compile from the repository with credentials in the environment, as on a laptop."""
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET_VALUE)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", ACCESS_KEY_VALUE)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://alice:hunter2@mlflow.example:5000")
    out = tmp_path / "pipeline.yaml"
    assert main(["pipeline", "compile", *args, "--out", str(out)]) == 0
    text = out.read_text()
    docs = list(yaml.safe_load_all(text))
    platform = docs[1]["platforms"]["kubernetes"]["deploymentSpec"] if len(docs) > 1 else {}
    return docs[0], platform, text


@pytest.fixture
def smoke(tmp_path, monkeypatch):
    return compile_with(tmp_path, monkeypatch, "--profile", "smoke")


def root_tasks(spec: dict) -> dict:
    return spec["root"]["dag"]["tasks"]


def loop_bodies(spec: dict) -> dict[str, list[str]]:
    """for-loop task -> the component tasks inside it."""
    return {
        name: list(spec["components"][task["componentRef"]["name"]]["dag"]["tasks"])
        for name, task in root_tasks(spec).items()
        if "parameterIterator" in task
    }


def test_the_dag_has_every_step_and_its_edges(smoke):
    spec, _, _ = smoke
    tasks = root_tasks(spec)
    components = {t["componentRef"]["name"].removeprefix("comp-") for t in tasks.values()}
    assert {"download", "tree", "smatrix", "features", "start", "evaluate", "report"} <= components
    bodies = loop_bodies(spec)
    assert sorted(bodies.values()) == [["baseline"], ["train"]]
    deps = {name: set(t.get("dependentTasks", [])) for name, t in tasks.items()}
    assert deps["tree"] == {"download"} and deps["smatrix"] == {"download", "tree"}
    assert deps["features"] == {"download"} and deps["start"] == {"download"}
    train_loop = next(n for n, body in bodies.items() if body == ["train"])
    baseline_loop = next(n for n, body in bodies.items() if body == ["baseline"])
    # Each loop fans out over its plan's list, after the data steps and the parent run.
    assert {"smatrix", "start"} <= deps[train_loop] and {"features"} <= deps[baseline_loop]
    for loop in (train_loop, baseline_loop):
        items = tasks[loop]["parameterIterator"]["items"]["inputParameter"]
        assert re.fullmatch(r"pipelinechannel--plan(-2)?-Output", items)
    assert {train_loop, baseline_loop, "smatrix"} <= deps["evaluate"]
    assert "evaluate" in deps["report"]
    collected = tasks["evaluate"]["inputs"]["artifacts"]
    assert {"deep_models", "shallow_models", "gist"} <= set(collected)


def test_parameters_mirror_params_yaml_with_the_profile_as_defaults(smoke):
    spec, _, _ = smoke
    parameters = spec["root"]["inputDefinitions"]["parameters"]
    expected = pipeline_arguments(
        resolve_params(REPO / "params.yaml", "smoke", profiles_dir=REPO / "profiles")
    )
    registry = {
        "register_model": "shdh-encoder",
        "register_metric": "ndcg_at_100",
        "register_alias": "champion",
    }  # the register step's, not params.yaml's
    assert {name: p["defaultValue"] for name, p in parameters.items()} == {**expected, **registry}
    train = json.loads(parameters["train"]["defaultValue"])
    assert train["epochs"] == 1 and isinstance(train["epochs"], int)  # ints stay ints
    assert json.loads(parameters["data"]["defaultValue"])["max_items"] == 600
    assert parameters["profile"]["defaultValue"] == "smoke"


def test_training_requests_a_gpu_and_every_task_gets_config_and_secret(smoke):
    """By default, the gpu overlay's shdh-train-scheduling: one GPU, on a GPU node."""
    spec, platform, _ = smoke
    executors = spec["deploymentSpec"]["executors"]
    accelerator = executors["exec-train"]["container"]["resources"]["accelerator"]
    assert accelerator["resourceType"] == "nvidia.com/gpu" and accelerator["resourceCount"] == "1"
    assert all("resources" not in e["container"] for n, e in executors.items() if n != "exec-train")
    assert set(platform["executors"]) == set(executors)
    for name, settings in platform["executors"].items():
        (config,) = settings["configMapAsEnv"]
        (secret,) = settings["secretAsEnv"]
        assert config["configMapName"] == "shdh-config", name
        assert {k["envVar"] for k in config["keyToEnv"]} >= {"MLFLOW_TRACKING_URI",
                                                             "MLFLOW_EXPERIMENT_NAME"}  # fmt: skip
        assert secret["secretName"] == "shdh-credentials", name
        assert {k["secretKey"] for k in secret["keyToEnv"]} == {
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "MLFLOW_TRACKING_USERNAME",  # the MLflow server's basic authentication
            "MLFLOW_TRACKING_PASSWORD",
        }
    train = platform["executors"]["exec-train"]
    assert train["nodeSelector"]["labels"] == {"nvidia.com/gpu.present": "true"}
    assert train["tolerations"] == [
        {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
    ]


def test_no_credential_reaches_the_compiled_yaml(smoke):
    """Not the values in the compiling shell, and no literal environment at all: every variable
    comes from the ConfigMap or the Secret, by name."""
    spec, _, text = smoke
    for value in (SECRET_VALUE, ACCESS_KEY_VALUE, "hunter2", "mlflow.example"):
        assert value not in text
    assert not re.search(r"AKIA[0-9A-Z]{16}", text)
    assert not re.search(r"(?i)(password|passwd)\s*[:=]", text)
    for executor in spec["deploymentSpec"]["executors"].values():
        assert "env" not in executor["container"]


@pytest.mark.parametrize("how", [["--no-gpu"], ["--scheduling", "k8s/base/config.yaml"]])
def test_cpu_training_has_no_gpu_request_selector_or_toleration(tmp_path, monkeypatch, how):
    """--no-gpu, or the base's shdh-train-scheduling (empty values): train on any node."""
    spec, platform, _ = compile_with(tmp_path, monkeypatch, "--profile", "smoke", *how)
    assert "resources" not in spec["deploymentSpec"]["executors"]["exec-train"]["container"]
    assert set(platform["executors"]["exec-train"]) == {"configMapAsEnv", "secretAsEnv"}


def test_scheduling_comes_from_the_configmap_as_kubectl_prints_it(tmp_path, monkeypatch):
    """`kubectl get configmap shdh-train-scheduling -o json`, with other labels and taints."""
    configmap = {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "shdh-train-scheduling", "namespace": "shdh"},
        "data": {
            "node_selector": json.dumps({"pool": "a100", "zone": "b"}),
            "tolerations": json.dumps([
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {"key": "spot", "operator": "Equal", "value": "yes", "effect": "NoExecute",
                 "tolerationSeconds": 60},
            ]),
            "accelerator_type": "nvidia.com/gpu", "accelerator_limit": "2",
        },
    }  # fmt: skip
    path = tmp_path / "scheduling.json"
    path.write_text(json.dumps(configmap))
    spec, platform, _ = compile_with(tmp_path, monkeypatch, "--scheduling", str(path))
    resources = spec["deploymentSpec"]["executors"]["exec-train"]["container"]["resources"]
    assert resources["accelerator"]["resourceCount"] == "2"
    train = platform["executors"]["exec-train"]
    assert train["nodeSelector"]["labels"] == {"pool": "a100", "zone": "b"}
    spot = {"key": "spot", "operator": "Equal", "value": "yes", "effect": "NoExecute"}
    assert train["tolerations"][1] == {**spot, "tolerationSeconds": "60"}  # int64 as JSON text


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({"accelerator_type": "nvidia.com/gpu", "accelerator_limit": "0"}, "accelerator_limit"),
        ({"tolerations": "[{\"key\": \"a\", \"effect\": \"NoSchedule\", \"x\": 1}]"},
         "data.tolerations"),
        ({"node_selector": "{pool: a100}"}, "data.node_selector: not valid JSON"),
        (None, "expected one ConfigMap named shdh-train-scheduling"),
    ],
)  # fmt: skip
def test_a_bad_scheduling_file_is_named(tmp_path, monkeypatch, caplog, data, message):
    path = tmp_path / "scheduling.yaml"
    name = "shdh-train-scheduling" if data is not None else "other"
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap",
                                    "metadata": {"name": name}, "data": data or {}}))  # fmt: skip
    monkeypatch.chdir(REPO)
    out = tmp_path / "never.yaml"
    assert main(["pipeline", "compile", "--scheduling", str(path), "--out", str(out)]) == 1
    assert str(path) in caplog.text and message in caplog.text
    assert not out.exists()
    caplog.clear()
    assert main(["pipeline", "compile", "--scheduling", str(path), "--no-gpu"]) == 1
    assert "not both" in caplog.text


def test_without_baselines_there_is_no_shallow_branch(tmp_path, monkeypatch):
    """No shallow methods: no features step, no baseline loop (a loop over nothing would leave
    evaluate an empty collection)."""
    spec, _, _ = compile_with(tmp_path, monkeypatch, "--param", "baselines.methods=[]")
    assert list(loop_bodies(spec).values()) == [["train"]]
    assert "features" not in root_tasks(spec)
    assert set(root_tasks(spec)["evaluate"]["inputs"]["artifacts"]) == {
        "deep_models",
        "prepared",
        "similarity",
    }


def test_param_overrides_and_typos(tmp_path, monkeypatch, caplog):
    spec, _, _ = compile_with(
        tmp_path, monkeypatch, "--profile", "smoke", "--param", "train.epochs=4",
        "--param", "baselines.ksh.n_anchors=20", "--param", "data.max_items=null",
    )  # fmt: skip
    parameters = spec["root"]["inputDefinitions"]["parameters"]
    defaults = {name: p["defaultValue"] for name, p in parameters.items()}
    assert json.loads(defaults["train"])["epochs"] == 4
    assert json.loads(defaults["baselines"])["ksh"]["n_anchors"] == 20
    assert json.loads(defaults["data"])["max_items"] is None
    out = str(tmp_path / "never.yaml")
    assert main(["pipeline", "compile", "--param", "train.epochz=4", "--out", out]) == 1
    assert "train.epochz" in caplog.text and not Path(out).exists()
    assert main(["pipeline", "compile", "--profile", "nosuch", "--out", out]) == 1
    assert "unknown profile 'nosuch'" in caplog.text


def test_image_is_chosen_at_compile_time(tmp_path):
    """--image (or SHDH_IMAGE) names the image of every task: in a fresh process, as the
    components read it when they are first imported."""
    out = tmp_path / "pipeline.yaml"
    env = {k: v for k, v in os.environ.items() if k != "SHDH_IMAGE"}
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "shdh"), "pipeline", "compile", "--profile", "smoke",
         "--image", "registry.example/team/shdh:abc123", "--out", str(out)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-2000:]
    executors = yaml.safe_load_all(out.read_text()).__next__()["deploymentSpec"]["executors"]
    assert {e["container"]["image"] for e in executors.values()} == {
        "registry.example/team/shdh:abc123"
    }


def test_the_local_build_has_no_cluster_settings(tmp_path):
    """What kfp.local runs: no accelerator (it would warn it has no effect), no platform spec."""
    import pipelines

    params = resolve_params(REPO / "params.yaml", "smoke", profiles_dir=REPO / "profiles")
    out = pipelines.compile_pipeline(params, tmp_path / "local.yaml", cluster=False)
    docs = list(yaml.safe_load_all(out.read_text()))
    assert len(docs) == 1  # no `platforms` document
    executors = docs[0]["deploymentSpec"]["executors"]
    assert all("resources" not in e["container"] for e in executors.values())
