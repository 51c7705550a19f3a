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
from shdh.kfp.components.image import DEFAULT_IMAGE
from shdh.kfp.pipelines.cluster_settings import STEPS
from shdh.kfp.pipelines.kfp_api import MIN_BACKEND
from shdh.kubeflow import branch_runs, fit_name, pipeline_arguments, resolve_params
from tests.conftest import REPO
from tests.infra.manifests import rendered_text as render_overlay

RESOURCE_FIELDS = {
    "resourceCpuRequest": "cpu_request",
    "resourceCpuLimit": "cpu_limit",
    "resourceMemoryRequest": "memory_request",
    "resourceMemoryLimit": "memory_limit",
}
SECRET_VALUE = "wJalrXUtnFEMI-not-a-real-secret-K7MDENG"
ACCESS_KEY_VALUE = "AKIAIOSFODNN7EXAMPLE"


def overlay_data(name: str) -> dict[str, str]:
    """The ConfigMap shdh-pipeline of an overlay, as kubectl kustomize renders it."""
    (data,) = [
        doc["data"]
        for doc in yaml.safe_load_all(render_overlay(f"overlays/{name}"))
        if doc and doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == "shdh-pipeline"
    ]
    return data


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


def compiled_once(tmp_path_factory, *args: str) -> tuple[dict, dict, str]:
    """compile_with for a module fixture: a compile takes seconds, and the tests only read it."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        return compile_with(tmp_path_factory.mktemp("compiled"), monkeypatch, *args)


@pytest.fixture(scope="module")
def smoke(tmp_path_factory):
    return compiled_once(tmp_path_factory, "--profile", "smoke")


@pytest.fixture(scope="module")
def smoke_on_gpus(tmp_path_factory):
    return compiled_once(tmp_path_factory, "--profile", "smoke", "--overlay", "gpu")


def root_tasks(spec: dict) -> dict:
    return spec["root"]["dag"]["tasks"]


def all_tasks(spec: dict) -> dict[tuple[str, str], dict]:
    """(DAG component, task name) -> task, for the root DAG ("root") and every nested DAG."""
    dags = {"root": spec["root"], **spec["components"]}
    return {
        (dag, name): task
        for dag, component in dags.items()
        for name, task in component.get("dag", {}).get("tasks", {}).items()
    }


def step_of(task: dict) -> str:
    """The component a task runs: train for the tasks train, train-2, ..."""
    return re.sub(r"-\d+$", "", task["componentRef"]["name"].removeprefix("comp-"))


def fit_tasks(spec: dict, step: str) -> dict[str, dict]:
    """The root DAG's tasks of a fit step (train, baseline), by their displayed fit name."""
    return {t["taskInfo"]["name"]: t for t in root_tasks(spec).values() if step_of(t) == step}


def producers(task: dict) -> set[str]:
    """The tasks whose outputs a task takes (artifacts and parameters)."""
    inputs = task.get("inputs", {})
    return {
        source[key]["producerTask"]
        for kind in ("artifacts", "parameters")
        for source in inputs.get(kind, {}).values()
        for key in ("taskOutputArtifact", "taskOutputParameter")
        if key in source
    }


def test_the_dag_has_every_step_and_its_edges(smoke):
    spec, _, _ = smoke
    tasks = root_tasks(spec)
    # Each step, no other; deploy only where the settings give the search service's URL.
    # deploy: only with deploy.service_url; trainjob: only with train.nodes or processes above 1
    assert {step_of(t) for t in tasks.values()} == set(STEPS) - {"deploy", "trainjob"}
    deps = {name: set(t.get("dependentTasks", [])) for name, t in tasks.items()}
    assert deps["tree"] == {"prepare"} and deps["smatrix"] == {"prepare", "tree"}
    assert deps["features"] == {"prepare"} and deps["start"] == {"prepare"}
    # Every fit after the data steps and the parent run; the shallow ones after the features.
    fits = {n for n, t in tasks.items() if step_of(t) in ("train", "baseline")}
    assert len(fits) == 9  # smoke: 2 deep and 7 shallow methods at 16 bits
    for name in fits:
        assert {"smatrix", "start"} <= deps[name], name
        assert step_of(tasks[name]) == "train" or "features" in deps[name], name
    assert fits | {"smatrix", "features"} <= deps["evaluate"]
    assert "evaluate" in deps["report"]
    given = tasks["evaluate"]["inputs"]["artifacts"]
    assert set(given) == {"prepared", "similarity", "gist"} | {f"fit_{i}" for i in range(9)}
    assert {given[f"fit_{i}"]["taskOutputArtifact"]["producerTask"] for i in range(9)} == fits


def test_the_dag_ends_by_registering_the_best_encoder_of_its_own_run(smoke):
    """As dvc.yaml's last stage: after evaluate has put every score on the method runs, the
    register task picks the best deep encoder of the parent run that start opened, by the
    pipeline's metric, and points the pipeline's alias at it. Only the index follows it."""
    spec, _, _ = smoke
    tasks = root_tasks(spec)
    register = tasks["register"]
    assert register["componentRef"]["name"] == "comp-register"
    assert set(register["dependentTasks"]) == {"evaluate", "start"}
    inputs = register["inputs"]["parameters"]
    assert inputs["parent_run_id"]["taskOutputParameter"]["producerTask"] == "start"
    assert {k: v["componentInputParameter"] for k, v in inputs.items() if k != "parent_run_id"} == {
        "model_name": "register_model",
        "metric": "register_metric",
        "alias": "register_alias",
    }
    assert {n for n, t in tasks.items() if "register" in t.get("dependentTasks", [])} == {"index"}


def test_the_index_encodes_the_database_with_the_version_just_registered(smoke):
    """As dvc.yaml's index stage: the database of the prepared split, encoded by the encoder the
    register task's alias points to, written as an artifact (the pipeline root's S3); the last
    task of the DAG."""
    spec, _, _ = smoke
    tasks = root_tasks(spec)
    index = tasks["index"]
    assert index["componentRef"]["name"] == "comp-index"
    assert set(index["dependentTasks"]) == {"prepare", "tree", "smatrix", "register"}
    given = index["inputs"]["parameters"]
    parameters = {
        k: v["componentInputParameter"] for k, v in given.items() if "runtimeValue" not in v
    }
    assert parameters == {"model_name": "register_model", "alias": "register_alias"}
    # the engine is params.yaml's index.engine, fixed at compile time: the in-process index
    assert given["engine"]["runtimeValue"]["constant"] == "memory"
    artifacts = index["inputs"]["artifacts"]
    assert {k: v["taskOutputArtifact"]["producerTask"] for k, v in artifacts.items()} == {
        "prepared": "prepare",
        "similarity": "smatrix",
        "labels": "tree",
    }
    outputs = spec["components"]["comp-index"]["outputDefinitions"]["artifacts"]
    assert set(outputs) == {"search_index"}
    assert not any("index" in t.get("dependentTasks", []) for t in tasks.values())
    # Its inputs repeat in every run on the same data while the alias moves: never cached.
    assert index["cachingOptions"] == {}
    assert tasks["prepare"]["cachingOptions"] == {"enableCache": True}


def test_parameters_mirror_params_yaml_with_the_profile_as_defaults(smoke):
    spec, _, _ = smoke
    parameters = spec["root"]["inputDefinitions"]["parameters"]
    params = resolve_params(REPO / "params.yaml", "smoke", profiles_dir=REPO / "profiles")
    params["train"]["device"] = "cpu"  # what the dev overlay's train nodes have
    expected = pipeline_arguments(params)
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


def test_every_task_gets_config_secret_and_the_sizes_of_its_step(smoke):
    """The dev overlay (the default): each task's requests and limits are its step's keys of
    the ConfigMap shdh-pipeline, or the `default.` ones."""
    spec, platform, _ = smoke
    executors = spec["deploymentSpec"]["executors"]
    assert set(platform["executors"]) == set(executors)
    for name, settings in platform["executors"].items():
        (config,) = settings["configMapAsEnv"]
        (secret,) = settings["secretAsEnv"]
        assert config["configMapName"] == "shdh-config", name
        assert {k["envVar"] for k in config["keyToEnv"]} >= {
            "MLFLOW_TRACKING_URI",
            "MLFLOW_EXPERIMENT_NAME",
        }
        assert secret["secretName"] == "shdh-credentials", name
        assert {k["secretKey"] for k in secret["keyToEnv"]} == {
            "AWS_ACCESS_KEY_ID",
            "AWS_SECRET_ACCESS_KEY",
            "MLFLOW_TRACKING_USERNAME",  # the MLflow server's basic authentication
            "MLFLOW_TRACKING_PASSWORD",
        }
    data = overlay_data("dev")
    for name, executor in executors.items():
        step = re.sub(r"-\d+$", "", name.removeprefix("exec-"))
        resources = executor["container"]["resources"]
        for field, key in RESOURCE_FIELDS.items():
            expected = data.get(f"{step}.{key}", data[f"default.{key}"])
            assert resources[field] == expected, (name, key)


def train_executors(spec: dict) -> list[str]:
    """The executors of the train tasks (exec-train, exec-train-2, ...: one per fit)."""
    names = [t["componentRef"]["name"] for t in fit_tasks(spec, "train").values()]
    return [spec["components"][name]["executorLabel"] for name in names]


def test_dev_trains_on_the_cpu_in_the_runtime_image(smoke):
    """No GPU request, selector or toleration on a dev cluster, and train.device cpu, so that
    nothing waits for a GPU that a kind or minikube node does not have."""
    spec, platform, _ = smoke
    assert len(train_executors(spec)) == 2
    for name in train_executors(spec):
        train = spec["deploymentSpec"]["executors"][name]["container"]
        assert "accelerator" not in train["resources"]
        assert train["image"] == DEFAULT_IMAGE
        assert not {"nodeSelector", "tolerations"} & set(platform["executors"][name])
        # the loader's workers get more than a pod's 64 MB of /dev/shm
        assert platform["executors"][name]["emptyDirMounts"] == [
            {"volumeName": "dshm", "mountPath": "/dev/shm", "medium": "Memory"}
        ]
    defaults = spec["root"]["inputDefinitions"]["parameters"]
    assert json.loads(defaults["train"]["defaultValue"])["device"] == "cpu"


def test_train_tasks_retry_with_backoff_within_a_deadline_and_fits_are_capped(smoke):
    spec, platform, _ = smoke
    data = overlay_data("dev")
    trains = fit_tasks(spec, "train")
    assert set(trains) == {"shdh-16", "dpsh-16"}
    for task in trains.values():
        assert task["retryPolicy"] == {
            "maxRetryCount": int(data["train.retries"]),
            "backoffDuration": "60s",
            "backoffFactor": 2.0,
            "backoffMaxDuration": "28800s",  # dev: 8h
        }
    for name in train_executors(spec):
        assert platform["executors"][name]["activeDeadlineSeconds"] == "7200"  # dev: 2h
    others = [t for t in all_tasks(spec).values() if step_of(t) != "train"]
    assert others and not any("retryPolicy" in t for t in others)
    # The loop caps as chains: the i-th fit of a kind waits for the (i - cap)-th, so no more
    # than cap of them run at once (dev: 1 train task, 2 baseline tasks).
    tasks = root_tasks(spec)
    for step, cap in (
        ("train", data["train.parallelism"]),
        ("baseline", data["baseline.parallelism"]),
    ):
        fits = [n for n, t in tasks.items() if step_of(t) == step]
        order = sorted(fits, key=lambda n: int(n.rpartition("-")[2]) if n != step else 1)
        for i, name in enumerate(order):
            waits = {d for d in tasks[name].get("dependentTasks", []) if d in fits}
            assert waits == ({order[i - int(cap)]} if i >= int(cap) else set()), name


def test_the_gpu_overlay_trains_on_a_gpu_node_in_the_cuda_image(smoke_on_gpus):
    """One GPU, the node selector and toleration of k8s/components/gpu, the CUDA image, and
    train.device cuda, so a node without a usable GPU fails the step instead of training on
    the CPU while holding the GPU."""
    spec, platform, _ = smoke_on_gpus
    executors = spec["deploymentSpec"]["executors"]
    trains = train_executors(spec)
    assert len(trains) == 2
    for name in trains:
        train = executors[name]["container"]
        accelerator = train["resources"]["accelerator"]
        assert accelerator["resourceType"] == "nvidia.com/gpu"
        assert accelerator["resourceCount"] == "1"
        assert train["image"] == f"{DEFAULT_IMAGE}-cuda"
        assert train["resources"]["resourceCpuLimit"] == overlay_data("gpu")["train.cpu_limit"]
        kube = platform["executors"][name]
        assert kube["nodeSelector"]["labels"] == {"nvidia.com/gpu.present": "true"}
        assert kube["tolerations"] == [
            {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
        ]
    others = {n: e for n, e in executors.items() if n not in trains}
    assert {e["container"]["image"] for e in others.values()} == {DEFAULT_IMAGE}
    assert all("accelerator" not in e["container"]["resources"] for e in others.values())
    defaults = spec["root"]["inputDefinitions"]["parameters"]
    assert json.loads(defaults["train"]["defaultValue"])["device"] == "cuda"


def test_two_nodes_per_fit_launch_a_trainjob_from_a_task_without_a_gpu(tmp_path, monkeypatch):
    """train.nodes 2 on the GPU overlay: each fit is a trainjob task (retried, under the
    deadline, with the step's environment by reference) that asks for no GPU itself and hands
    its nodes the CUDA image, the train step's sizes, a GPU a process and the GPU nodes'
    scheduling."""
    args = ("--profile", "smoke", "--overlay", "gpu")
    nodes = ("--set", "train.nodes=2", "--set", "train.processes_per_node=2")
    spec, platform, _ = compile_with(tmp_path, monkeypatch, *args, *nodes)
    assert fit_tasks(spec, "train") == {}
    jobs = fit_tasks(spec, "trainjob")
    assert set(jobs) == {"shdh-16", "dpsh-16"}
    data = overlay_data("gpu")
    for task in jobs.values():
        assert task["retryPolicy"]["maxRetryCount"] == int(data["train.retries"])
        executor = spec["components"][task["componentRef"]["name"]]["executorLabel"]
        kube = platform["executors"][executor]
        assert "SHDH_CHECKPOINT_URL" in env_sources(kube)
        deadline = int(kube["activeDeadlineSeconds"])
        assert deadline == 6 * 3600  # the overlay's train.timeout
        wanted = json.loads(task["inputs"]["parameters"]["nodes"]["runtimeValue"]["constant"])
        assert wanted == {
            "image": f"{DEFAULT_IMAGE}-cuda",
            "gpu": True,
            "resources": {
                "cpu": data["train.cpu_limit"],
                "memory": data["train.memory_limit"],
                "gpu": 2,
            },
            "node_selector": {"nvidia.com/gpu.present": "true"},
            "tolerations": [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}
            ],
            "deadline_seconds": deadline,  # the job's own: it stops where the step would
        }
        container = spec["deploymentSpec"]["executors"][executor]["container"]
        assert container["image"] == DEFAULT_IMAGE
        assert "accelerator" not in container["resources"]
        assert "launch(" in " ".join(container["command"])  # shdh.trainjob.launch


def test_several_processes_on_a_cpu_node_are_refused_when_compiling(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(REPO)
    out = tmp_path / "pipeline.yaml"
    args = [
        "--profile",
        "smoke",
        "--set",
        "train.nodes=2",
        "--set",
        "train.processes_per_node=2",
        "--out",
        str(out),
    ]
    assert main(["pipeline", "compile", *args]) != 0
    assert "train.processes_per_node=2: several processes on a node need a GPU" in caplog.text
    assert not out.exists()


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


def test_settings_come_from_the_configmap_as_kubectl_prints_it(tmp_path, monkeypatch):
    """--settings: `kubectl get configmap shdh-pipeline -o json` from a cluster with other
    labels, taints and sizes than the repository's overlays."""
    data = {
        **overlay_data("gpu"),
        "train.accelerator_limit": "2",
        "train.cpu_limit": "6",
        "train.node_selector": json.dumps({"pool": "a100", "zone": "b"}),
        "train.tolerations": json.dumps(
            [
                {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                {
                    "key": "spot",
                    "operator": "Equal",
                    "value": "yes",
                    "effect": "NoExecute",
                    "tolerationSeconds": 60,
                },
            ]
        ),
    }
    configmap = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "data": data,
        "metadata": {"name": "shdh-pipeline", "namespace": "team"},
    }
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(configmap))
    spec, platform, _ = compile_with(tmp_path, monkeypatch, "--settings", str(path))
    resources = spec["deploymentSpec"]["executors"]["exec-train"]["container"]["resources"]
    assert resources["accelerator"]["resourceCount"] == "2"
    assert resources["resourceCpuLimit"] == "6"
    train = platform["executors"]["exec-train"]
    assert train["nodeSelector"]["labels"] == {"pool": "a100", "zone": "b"}
    spot = {"key": "spot", "operator": "Equal", "value": "yes", "effect": "NoExecute"}
    assert train["tolerations"][1] == {**spot, "tolerationSeconds": "60"}  # int64 as JSON text


def test_image_pull_secrets_are_optional_and_reach_every_task(tmp_path, monkeypatch, smoke):
    """A private registry: every pod pulls with the Secrets named in the settings; none is set
    by the repository's overlays."""
    _, plain, _ = smoke
    assert not any("imagePullSecret" in e for e in plain["executors"].values())
    configmap = {
        "kind": "ConfigMap",
        "metadata": {"name": "shdh-pipeline"},
        "data": {**overlay_data("dev"), "image_pull_secrets": "regcred, mirror-creds"},
    }
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(configmap))
    spec, platform, _ = compile_with(tmp_path, monkeypatch, "--settings", str(path))
    assert set(platform["executors"]) == set(spec["deploymentSpec"]["executors"])
    for executor in platform["executors"].values():
        names = [s["secretName"] for s in executor["imagePullSecret"]]
        assert names == ["regcred", "mirror-creds"]


def settings_file(tmp_path: Path, **changes: str) -> Path:
    """The dev overlay's ConfigMap shdh-pipeline with `changes` (dots in keys as __)."""
    data = {**overlay_data("dev"), **{k.replace("__", "."): v for k, v in changes.items()}}
    path = tmp_path / "settings.json"
    path.write_text(
        json.dumps({"kind": "ConfigMap", "metadata": {"name": "shdh-pipeline"}, "data": data})
    )
    return path


def env_sources(executor: dict) -> dict[str, tuple[str, str]]:
    """Each variable a task's pod gets, as (ConfigMap or Secret name, key)."""
    found = {}
    for source in executor.get("configMapAsEnv", []):
        for item in source["keyToEnv"]:
            found[item["envVar"]] = (source["configMapName"], item["configMapKey"])
    for source in executor.get("secretAsEnv", []):
        for item in source["keyToEnv"]:
            found[item["envVar"]] = (source["secretName"], item["secretKey"])
    return found


def test_the_deploy_step_is_off_unless_the_settings_name_the_service(smoke):
    spec, platform, _ = smoke
    assert "deploy" not in root_tasks(spec) and "exec-deploy" not in platform["executors"]
    for overlay in ("dev", "gpu", "kubeflow", "profile"):
        assert "deploy.service_url" not in overlay_data(overlay), overlay


def test_the_deploy_step_publishes_the_new_index_and_reloads_the_service(tmp_path, monkeypatch):
    """With deploy.service_url: the last task takes the index task's artifact, the S3 prefix
    from the ConfigMap the service's Deployment reads it from, and the token from the
    service's Secret (k8s/base/search.yaml), all by reference."""
    path = settings_file(tmp_path, deploy__service_url="http://shdh-search:8000/")
    spec, platform, text = compile_with(tmp_path, monkeypatch, "--settings", str(path))
    tasks = root_tasks(spec)
    deploy = tasks["deploy"]
    assert deploy["dependentTasks"] == ["index"]
    assert deploy["cachingOptions"] == {}  # the reload is its work: never taken from the cache
    artifact = deploy["inputs"]["artifacts"]["search_index"]["taskOutputArtifact"]
    assert artifact == {"outputArtifactKey": "search_index", "producerTask": "index"}
    url = deploy["inputs"]["parameters"]["service_url"]["runtimeValue"]["constant"]
    assert url == "http://shdh-search:8000"
    assert not any("deploy" in t.get("dependentTasks", []) for t in tasks.values())
    env = env_sources(platform["executors"]["exec-deploy"])
    assert env["SHDH_SEARCH_INDEX_URL"] == ("shdh-config", "SHDH_SEARCH_INDEX_URL")
    assert env["SHDH_SERVE_TOKEN"] == ("shdh-search-token", "token")
    assert env["AWS_SECRET_ACCESS_KEY"] == ("shdh-credentials", "AWS_SECRET_ACCESS_KEY")
    resources = spec["deploymentSpec"]["executors"]["exec-deploy"]["container"]["resources"]
    assert resources["resourceMemoryLimit"] == overlay_data("dev")["default.memory_limit"]
    # The names the service's manifests use.
    objects = list(yaml.safe_load_all(render_overlay("overlays/dev")))
    (config,) = [o for o in objects if o and o["metadata"]["name"] == "shdh-config"]
    assert "SHDH_SEARCH_INDEX_URL" in config["data"]
    (search,) = [
        o
        for o in objects
        if o and o["kind"] == "Deployment" and o["metadata"]["name"] == "shdh-search"
    ]
    secrets = [
        v["secret"]["secretName"]
        for v in search["spec"]["template"]["spec"]["volumes"]
        if "secret" in v
    ]
    assert secrets == ["shdh-search-token"]


def test_the_deploy_token_secret_is_a_setting(tmp_path, monkeypatch):
    path = settings_file(
        tmp_path, deploy__service_url="http://search.team:8000", deploy__token_secret="team-token"
    )
    _, platform, _ = compile_with(tmp_path, monkeypatch, "--settings", str(path))
    assert env_sources(platform["executors"]["exec-deploy"])["SHDH_SERVE_TOKEN"] == (
        "team-token",
        "token",
    )


@pytest.mark.parametrize(
    ("changes", "key", "problem"),
    [
        ({"deploy__service_url": "shdh-search:8000"}, "deploy.service_url", "http(s)://"),
        ({"deploy__token_secret": "shdh-search-token"}, "deploy.token_secret", "without"),
        (
            {"deploy__service_url": "http://a:1", "deploy__token_secret": "a,b"},
            "deploy.token_secret",
            "one Secret name",
        ),
    ],
)
def test_a_bad_deploy_setting_is_one_line(tmp_path, monkeypatch, caplog, changes, key, problem):
    path = settings_file(tmp_path, **changes)
    monkeypatch.chdir(REPO)
    assert main(["pipeline", "compile", "--settings", str(path), "--out", "x.yaml"]) == 1
    (line,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert f"data.{key}" in line and problem in line


def test_a_bad_image_pull_secret_name_is_one_line(tmp_path, monkeypatch, caplog):
    configmap = {
        "kind": "ConfigMap",
        "metadata": {"name": "shdh-pipeline"},
        "data": {**overlay_data("dev"), "image_pull_secrets": "Reg_Cred"},
    }
    path = tmp_path / "settings.json"
    path.write_text(json.dumps(configmap))
    monkeypatch.chdir(REPO)
    assert main(["pipeline", "compile", "--settings", str(path), "--out", "x.yaml"]) == 1
    (line,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert "data.image_pull_secrets" in line and "'Reg_Cred'" in line


def test_an_unknown_overlay_is_one_line_naming_the_known_ones(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(REPO)
    out = tmp_path / "never.yaml"
    assert main(["pipeline", "compile", "--overlay", "gpux", "--out", str(out)]) == 1
    (line,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert "--overlay gpux: no such overlay" in line
    assert all(name in line for name in ("dev", "gpu", "kubeflow", "profile"))
    assert not out.exists()


@pytest.mark.parametrize(
    ("overlay", "device", "fix"),
    [
        ("gpu", "cpu", "gives each train task a GPU"),
        ("dev", "cuda", "gives each train task no GPU"),
    ],
)
def test_a_device_that_contradicts_the_overlay_is_refused(
    tmp_path, monkeypatch, caplog, overlay, device, fix
):
    monkeypatch.chdir(REPO)
    out = tmp_path / "never.yaml"
    argv = ["pipeline", "compile", "--overlay", overlay, "--set", f"train.device={device}"]
    assert main([*argv, "--out", str(out)]) == 1
    (line,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert f"train.device is '{device}'" in line and f"overlay {overlay} {fix}" in line
    assert not out.exists()


def test_weights_only_this_machine_has_are_refused_for_a_cluster(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(REPO)
    out = tmp_path / "never.yaml"
    argv = ["pipeline", "compile", "--set", "train.pretrained=weights/r50.pth", "--out", str(out)]
    assert main(argv) == 1
    (line,) = [r.getMessage() for r in caplog.records if r.levelname == "ERROR"]
    assert "train.pretrained is 'weights/r50.pth', a file on this machine" in line
    assert "s3://" in line and not out.exists()


def test_without_baselines_there_is_no_shallow_branch(tmp_path, monkeypatch):
    """No shallow methods: no features step, no baseline task, and evaluate takes no GIST."""
    spec, _, _ = compile_with(tmp_path, monkeypatch, "--set", "baselines.methods=[]")
    assert {step_of(t) for t in root_tasks(spec).values()} & {"features", "baseline"} == set()
    assert set(root_tasks(spec)["evaluate"]["inputs"]["artifacts"]) == {
        *(f"fit_{i}" for i in range(6)),  # shdh and dpsh at 32, 48 and 64 bits
        "prepared",
        "similarity",
    }


def test_param_overrides_and_typos(tmp_path, monkeypatch, caplog):
    spec, _, _ = compile_with(
        tmp_path,
        monkeypatch,
        "--profile",
        "smoke",
        "--set",
        "train.epochs=4",
        "--set",
        "baselines.ksh.n_anchors=20",
        "--set",
        "data.max_items=null",
    )
    parameters = spec["root"]["inputDefinitions"]["parameters"]
    defaults = {name: p["defaultValue"] for name, p in parameters.items()}
    assert json.loads(defaults["train"])["epochs"] == 4
    assert json.loads(defaults["baselines"])["ksh"]["n_anchors"] == 20
    assert json.loads(defaults["data"])["max_items"] is None
    out = str(tmp_path / "never.yaml")
    assert main(["pipeline", "compile", "--set", "train.epochz=4", "--out", out]) == 1
    assert "train.epochz" in caplog.text and not Path(out).exists()
    assert main(["pipeline", "compile", "--profile", "nosuch", "--out", out]) == 1
    assert "unknown profile 'nosuch'" in caplog.text
    argv = ["pipeline", "compile", "--profile", "smoke", "--set", "train.epochs=two"]
    assert main([*argv, "--out", out]) == 1  # a bad value names what it may have come from
    assert "params.yaml with profile smoke, --set train.epochs=two: train.epochs" in caplog.text


def test_image_is_chosen_at_compile_time(tmp_path):
    """--image (or SHDH_IMAGE) names the runtime image of every task and, with the tag's
    -cuda suffix, the GPU image of the train tasks: in a fresh process, as the components read
    it when they are first imported."""
    out = tmp_path / "pipeline.yaml"
    env = {k: v for k, v in os.environ.items() if k != "SHDH_IMAGE"}
    proc = subprocess.run(
        [
            str(Path(sys.executable).parent / "shdh"),
            "pipeline",
            "compile",
            "--profile",
            "smoke",
            "--overlay",
            "gpu",
            "--image",
            "registry.example/team/shdh:abc123",
            "--out",
            str(out),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    executors = yaml.safe_load_all(out.read_text()).__next__()["deploymentSpec"]["executors"]
    images = {name: e["container"]["image"] for name, e in executors.items()}
    trains = [name for name in images if re.fullmatch(r"exec-train(-\d+)?", name)]
    assert len(trains) == 2  # smoke: shdh-16 and dpsh-16
    assert {images.pop(name) for name in trains} == {"registry.example/team/shdh:abc123-cuda"}
    assert set(images.values()) == {"registry.example/team/shdh:abc123"}


DIGEST = "sha256:" + "ab" * 32
GPU_DIGEST = "sha256:" + "cd" * 32


def test_images_named_by_digest_are_compiled_as_given(tmp_path):
    """A digest pins the bytes a pod runs; the CUDA image's digest comes from SHDH_GPU_IMAGE."""
    out = tmp_path / "pipeline.yaml"
    env = {k: v for k, v in os.environ.items() if k not in ("SHDH_IMAGE", "SHDH_GPU_IMAGE")}
    env["SHDH_GPU_IMAGE"] = f"registry.example:5000/team/shdh@{GPU_DIGEST}"
    command = [str(Path(sys.executable).parent / "shdh"), "pipeline", "compile"]
    command += ["--profile", "smoke", "--overlay", "gpu", "--out", str(out)]
    command += ["--image", f"registry.example:5000/team/shdh:0.2.0@{DIGEST}"]
    proc = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    executors = yaml.safe_load_all(out.read_text()).__next__()["deploymentSpec"]["executors"]
    images = {name: e["container"]["image"] for name, e in executors.items()}
    trains = [name for name in images if re.fullmatch(r"exec-train(-\d+)?", name)]
    assert len(trains) == 2  # smoke: shdh-16 and dpsh-16
    assert {images.pop(name) for name in trains} == {
        f"registry.example:5000/team/shdh@{GPU_DIGEST}"
    }
    assert set(images.values()) == {f"registry.example:5000/team/shdh:0.2.0@{DIGEST}"}


def test_a_digest_without_its_gpu_image_is_refused_by_name(monkeypatch):
    from shdh.kfp.components.image import gpu_image, parse_image

    monkeypatch.delenv("SHDH_GPU_IMAGE", raising=False)
    assert parse_image(f"r.example/shdh@{DIGEST}") == ("r.example/shdh", None, DIGEST)
    with pytest.raises(ValueError, match="set SHDH_GPU_IMAGE"):
        gpu_image(f"r.example/shdh@{DIGEST}")
    assert gpu_image("r.example/shdh:1.0") == "r.example/shdh:1.0-cuda"


def test_the_default_repository_is_a_setting(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SHDH_IMAGE"}
    env["SHDH_IMAGE_REPOSITORY"] = "registry.example/mirror/shdh"
    code = "from shdh.kfp.components.image import IMAGE, gpu_image; print(IMAGE, gpu_image())"
    proc = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, env=env, capture_output=True, text=True
    )
    from shdh import __version__

    image = f"registry.example/mirror/shdh:{__version__}"
    assert proc.stdout.split() == [image, f"{image}-cuda"], proc.stderr


@pytest.mark.parametrize("image", ["registry.example/shdh", "registry.example/shdh@sha256:ab12"])
def test_an_image_without_a_tag_is_refused_by_name(image):
    from shdh.kfp.components.image import split_image

    with pytest.raises(ValueError, match=r"SHDH_IMAGE=.*expected REGISTRY/NAME:TAG"):
        split_image(image)


def test_a_malformed_image_option_is_named_as_the_option(tmp_path, monkeypatch, caplog):
    monkeypatch.chdir(REPO)
    argv = ["pipeline", "compile", "--image", "no image", "--out", str(tmp_path / "x.yaml")]
    code = f"from shdh.cli import main; raise SystemExit(main({argv!r}))"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert proc.returncode == 1 and "--image='no image': expected REGISTRY" in proc.stderr


def test_the_local_build_has_no_cluster_settings(tmp_path):
    """What kfp.local runs: no accelerator (it would warn it has no effect), no sizes, no
    platform spec, and the train device as params.yaml says."""
    from shdh.kfp import pipelines

    params = resolve_params(REPO / "params.yaml", "smoke", profiles_dir=REPO / "profiles")
    out = pipelines.compile_pipeline(params, tmp_path / "local.yaml")
    docs = list(yaml.safe_load_all(out.read_text()))
    assert len(docs) == 1  # no `platforms` document
    executors = docs[0]["deploymentSpec"]["executors"]
    assert all("resources" not in e["container"] for e in executors.values())
    defaults = docs[0]["root"]["inputDefinitions"]["parameters"]
    assert json.loads(defaults["train"]["defaultValue"])["device"] == params["train"]["device"]


SEEDED = (
    "--profile",
    "smoke",
    "--set",
    "train.methods=[shdh, dpsh]",
    "--set",
    "train.bits=[16, 32]",
    "--set",
    "train.seeds=[1, 2]",
    "--set",
    "baselines.methods=[itq, kmh]",
    "--set",
    "baselines.bits=[16, 30]",
    "--overlay",
    "gpu",
)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory):
    """A plan with several deep methods, code lengths and seeds, and two shallow methods (KMH
    only at 16 bits: its 4-bit subspaces do not divide 30), for the GPU cluster."""
    spec, platform, _ = compiled_once(tmp_path_factory, *SEEDED)
    params = resolve_params(REPO / "params.yaml", "smoke", profiles_dir=REPO / "profiles")
    params["train"].update(methods=["shdh", "dpsh"], bits=[16, 32], seeds=[1, 2])
    params["baselines"].update(methods=["itq", "kmh"], bits=[16, 30])
    plan = {
        step: [fit_name(r) for r in branch_runs(params["train"], params["baselines"], kind)]
        for step, kind in (("train", "deep"), ("baseline", "shallow"))
    }
    return spec, platform, plan


def test_every_planned_fit_is_a_task_of_the_root_dag_named_by_its_fit(seeded):
    """KFP ignores set_retry inside a ParallelFor: every fit of the plan is a task of its own in
    the root DAG, shown by its fit's name, and every deep fit carries the retries."""
    spec, _, plan = seeded
    assert len(plan["train"]) == 8 and "shdh-32-seed2" in plan["train"]
    assert plan["baseline"] == ["itq-16", "kmh-16", "itq-30"]
    for step, names in plan.items():
        tasks = fit_tasks(spec, step)
        assert sorted(tasks) == sorted(names)  # one task per fit, none twice
        shown = [t["taskInfo"]["name"] for t in root_tasks(spec).values() if step_of(t) == step]
        assert len(shown) == len(names)
    data = overlay_data("gpu")
    for name, task in fit_tasks(spec, "train").items():
        assert task["retryPolicy"]["maxRetryCount"] == int(data["train.retries"]), name
    # Each deep fit trains its own method, bits and seed, given as constants of its task.
    task = fit_tasks(spec, "train")["dpsh-32-seed1"]["inputs"]["parameters"]
    constants = {k: task[k]["runtimeValue"]["constant"] for k in ("method", "bits", "own_seed")}
    assert constants == {"method": "dpsh", "bits": 32, "own_seed": 1}


def test_no_task_inside_a_loop_and_no_retry_outside_the_root_dag(seeded):
    """The backend drops the retries of a task in a for-loop DAG: there is no such DAG, and
    every retried task (a deep fit) is a task of the root DAG."""
    spec, _, plan = seeded
    assert {dag for dag, _ in all_tasks(spec)} == {"root"}  # no for-loop (or other) sub-DAG
    assert not any(
        "parameterIterator" in t or "artifactIterator" in t for t in all_tasks(spec).values()
    )
    retried = {key for key, t in all_tasks(spec).items() if "retryPolicy" in t}
    assert {dag for dag, _ in retried} == {"root"}
    shown = {root_tasks(spec)[name]["taskInfo"]["name"] for _, name in retried}
    assert shown == set(plan["train"])


def test_evaluate_scores_every_fit_and_register_runs_last(seeded):
    spec, _, plan = seeded
    tasks = root_tasks(spec)
    fits = {n for n, t in tasks.items() if step_of(t) in ("train", "baseline")}
    assert len(fits) == len(plan["train"]) + len(plan["baseline"])
    evaluate = tasks["evaluate"]
    assert fits <= set(evaluate["dependentTasks"])
    assert producers(evaluate) >= fits
    runs = evaluate["inputs"]["parameters"]
    scored = [
        fit_name(r)
        for key in ("deep_runs", "shallow_runs")
        for r in runs[key]["runtimeValue"]["constant"]
    ]
    assert scored == plan["train"] + plan["baseline"]  # the plan, in scoring order
    # fit_i is the model of the i-th fit of the plan
    given = evaluate["inputs"]["artifacts"]
    shown = {n: t["taskInfo"]["name"] for n, t in tasks.items()}
    assert [
        shown[given[f"fit_{i}"]["taskOutputArtifact"]["producerTask"]] for i in range(len(scored))
    ] == scored
    # register after evaluate, then the index, and nothing after it
    assert "evaluate" in tasks["register"]["dependentTasks"]
    assert {n for n, t in tasks.items() if "register" in t.get("dependentTasks", [])} == {"index"}
    assert not any("register" in producers(t) for t in tasks.values())
    assert not any("index" in t.get("dependentTasks", []) for t in tasks.values())


def ir_features(node, path: str = "") -> set[str]:
    """The IR fields that need a KFP backend newer than MIN_BACKEND wherever they appear:
    loops (parameter and artifact iterators, their parallelism cap), lists of artifacts (what
    dsl.Collected hands a task) and DAG outputs selected from several tasks (a loop's collected
    outputs, dsl.OneOf). A DAG output taken from one task (the pipeline's results and report)
    is as old as KFP 2."""
    newer = {
        "parameterIterator",
        "artifactIterator",
        "iteratorPolicy",
        "isArtifactList",
        "valueFromOneof",
    }
    found = set()
    if isinstance(node, dict):
        for key, value in node.items():
            if key in newer:
                found.add(f"{path}/{key}")
            if key in ("artifactSelectors", "parameterSelectors") and len(value) > 1:
                found.add(f"{path}/{key}")
            found |= ir_features(value, f"{path}/{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            found |= ir_features(value, f"{path}/{i}")
    return found


@pytest.fixture(scope="module")
def gpu_profile(tmp_path_factory):
    return compiled_once(tmp_path_factory, "--profile", "gpu", "--overlay", "gpu")


@pytest.mark.parametrize("compiled", ["smoke_on_gpus", "gpu_profile"])
def test_the_compiled_ir_needs_no_backend_newer_than_the_minimum(request, compiled):
    """`shdh pipeline submit` accepts KFP 2.5.0 (Kubeflow 1.10's), so the IR may use nothing
    newer: no ParallelFor and no dsl.Collected artifact fan-in (2.14.0), no optional artifact
    input. The job-id placeholder and task retries are 2.5.0's."""
    assert MIN_BACKEND == (2, 5, 0)
    spec, _, text = request.getfixturevalue(compiled)
    assert ir_features(spec) == set()
    for name, component in spec["components"].items():
        artifacts = component.get("inputDefinitions", {}).get("artifacts", {})
        assert not any(a.get("isOptional") for a in artifacts.values()), name
    assert "{{$.pipeline_job_uuid}}" in text


def test_the_index_task_writes_a_milvus_collection_when_the_params_say_so(
    tmp_path, monkeypatch, smoke_on_gpus
):
    """index.engine milvus (params.yaml) on the milvus overlay: the index task gets the engine
    and its settings as constants, the tree step's folder (the label tree the collection keeps),
    Milvus's address from the ConfigMap and the token from the Milvus Secret, by reference, as
    k8s/components/milvus names them; without it, no Milvus variable at all."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["index"] |= {"engine": "milvus", "milvus_index": "BIN_IVF_FLAT", "milvus_nlist": 64}
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(params))
    spec, platform, text = compile_with(
        tmp_path, monkeypatch, "--params", str(path), "--profile", "smoke", "--overlay", "milvus"
    )
    index = root_tasks(spec)["index"]
    constants = {
        name: value["runtimeValue"]["constant"]
        for name, value in index["inputs"]["parameters"].items()
        if "runtimeValue" in value
    }
    assert constants["engine"] == "milvus" and constants["milvus_index"] == "BIN_IVF_FLAT"
    assert constants["milvus_nlist"] == 64 and constants["milvus_collection"] == ""
    labels = index["inputs"]["artifacts"]["labels"]["taskOutputArtifact"]
    assert labels == {"outputArtifactKey": "labels", "producerTask": "tree"}
    env = env_sources(platform["executors"]["exec-index"])
    assert env["SHDH_MILVUS_URI"] == ("shdh-config", "SHDH_MILVUS_URI")
    assert env["SHDH_MILVUS_TOKEN"] == ("shdh-milvus-credentials", "MILVUS_TOKEN")
    objects = [o for o in yaml.safe_load_all(render_overlay("overlays/milvus")) if o]
    (config,) = [o for o in objects if o["metadata"]["name"] == "shdh-config"]
    assert config["data"]["SHDH_MILVUS_URI"].startswith("http://")
    memory = compile_with(
        tmp_path / "memory", monkeypatch, "--profile", "smoke", "--overlay", "dev"
    )
    assert "SHDH_MILVUS_TOKEN" not in env_sources(memory[1]["executors"]["exec-index"])
