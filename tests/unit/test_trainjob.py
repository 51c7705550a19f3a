"""The TrainJob launch (shdh.trainjob) against a fake Kubeflow
SDK client: the order of its calls, the failure path, what the nodes get on a cluster, and the
settings refused. The real SDK runs a real two-node job in tests/containers/test_trainjob.py."""

from __future__ import annotations

import json
import types

import pytest

from shdh import trainjob
from shdh.kubeflow import fit_component
from shdh.plan.processes import node_resources, processes, refuse_several_processes
from shdh.runtime.errors import ConfigError
from shdh.tracking.cluster_env import SECRET, SECRET_KEYS


class FakeClient:
    """TrainerClient's calls the launch makes, recorded; `status` is where the job ends."""

    def __init__(self, status: str = "Complete", existing: bool = False) -> None:
        self.status, self.calls, self.existing = status, [], existing
        self.backend = object()  # not Kubernetes: no runtime patch

    def get_job(self, name):
        self.calls.append(("get_job", name))
        if not self.existing:
            raise RuntimeError("not found")
        return types.SimpleNamespace(status="Failed")

    def delete_job(self, name):
        self.calls.append(("delete_job", name))
        self.existing = False

    def train(self, runtime, trainer, options):
        self.calls.append(("train", runtime, trainer.num_nodes, trainer.func_args))
        self.trainer, self.options, self.existing = trainer, options, True

    def wait_for_job_status(self, name, status, timeout, polling_interval):
        self.calls.append(("wait", tuple(sorted(status))))
        if self.status == "Failed" and "Failed" not in status:
            raise RuntimeError(f"TrainJob {name} is Failed\n  node-1: exit_code=137")
        return types.SimpleNamespace(status=self.status)

    def get_job_logs(self, name, follow):
        yield "epoch 1\n"
        yield "epoch 2\n"

    def get_job_events(self, name):
        return [
            types.SimpleNamespace(
                involved_object_name=f"{name}-node-1",
                reason="Evicted",
                message="the node was drained",
            )
        ]


SPEC = trainjob.JobSpec(name="shdh-0123", image="localhost/shdh:0.2.0", nodes=2)


def test_a_job_is_created_streamed_waited_for_and_deleted():
    client, lines = FakeClient(), []
    trainjob.run_job(client, SPEC, {"job_url": "s3://b/p/job"}, lines.append)
    assert lines == ["epoch 1", "epoch 2"]
    names = [c[0] for c in client.calls]
    assert names == ["get_job", "train", "wait", "wait", "get_job", "delete_job"]
    assert client.calls[1] == ("train", "torch-distributed", 2, {"job_url": "s3://b/p/job"})
    assert client.calls[3] == ("wait", ("Complete",))
    assert client.options[0].name == "shdh-0123"
    assert client.trainer.func is trainjob.node_main and client.trainer.image == SPEC.image


def test_a_failed_job_fails_with_its_reason_and_is_deleted_all_the_same():
    client = FakeClient(status="Failed")
    with pytest.raises(trainjob.TrainJobError, match=r"is Failed(.|\n)*node-1: Evicted: the node"):
        trainjob.run_job(client, SPEC, {}, lambda line: None)
    assert client.calls[-1] == ("delete_job", "shdh-0123")


def test_a_step_stopped_by_sigterm_deletes_its_job_before_it_exits():
    """Kubernetes stops the step's pod with SIGTERM at its deadline or when the run is
    terminated: the job must not outlive it, holding its nodes' GPUs."""
    import os
    import signal

    class Stopped(FakeClient):
        def get_job_logs(self, name, follow):
            yield "epoch 1\n"
            os.kill(os.getpid(), signal.SIGTERM)
            yield "never streamed\n"

    client, lines = Stopped(), []
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as stopped:
        trainjob.run_job(client, SPEC, {}, lines.append)
    assert stopped.value.code == 128 + signal.SIGTERM and lines == ["epoch 1"]
    assert client.calls[-1] == ("delete_job", "shdh-0123")
    assert signal.getsignal(signal.SIGTERM) is before  # the step's own handling after the job


def test_a_job_left_by_a_killed_step_is_deleted_before_the_new_one():
    client = FakeClient(existing=True)
    trainjob.run_job(client, SPEC, {}, lambda line: None)
    assert [c[0] for c in client.calls[:3]] == ["get_job", "delete_job", "train"]


def test_the_script_the_sdk_makes_of_node_main_runs_it_alone(monkeypatch):
    """The SDK copies node_main's source into the job's script: it must need nothing of this
    module's namespace."""
    from kubeflow.trainer import CustomTrainer
    from kubeflow.trainer.backends.container.utils import get_training_script_code

    import shdh.runtime.instruction_set

    calls = []
    monkeypatch.setattr(shdh.runtime.instruction_set, "pin_cpu", lambda: calls.append("pin"))
    monkeypatch.setattr(trainjob, "run_node", lambda url: calls.append(url))
    trainer = CustomTrainer(func=trainjob.node_main, func_args={"job_url": "s3://b/p/job"})
    exec(compile(get_training_script_code(trainer), "/tmp/train.py", "exec"), {})  # noqa: S102
    assert calls == ["pin", "s3://b/p/job"]


def test_job_names_are_fixed_by_the_fit_and_valid_kubernetes_names():
    name = trainjob.job_name("run-1", "shdh-16")
    assert name == trainjob.job_name("run-1", "shdh-16") != trainjob.job_name("run-2", "shdh-16")
    assert len(name) <= 40 and name.replace("-", "").isalnum() and name.islower()


def test_cluster_nodes_read_credentials_by_reference_run_on_the_gpu_nodes_with_shm():
    from kubeflow.trainer.backends.kubernetes.backend import KubernetesBackend

    from shdh.tracking.cluster_env import env_references

    client = types.SimpleNamespace(backend=object.__new__(KubernetesBackend))
    spec = trainjob.JobSpec(
        name="shdh-0123",
        image="img",
        nodes=2,
        env_refs=env_references(),
        node_selector={"nvidia.com/gpu.present": "true"},
        tolerations=[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        deadline_seconds=7200,
    )
    job_spec: dict = {}
    for option in trainjob._cluster_options(client, spec):
        option(job_spec, None, client.backend)
    (patch,) = job_spec["spec"]["runtimePatches"]
    # the job's own deadline stops its nodes where a killed step could not delete it
    assert job_spec["spec"]["activeDeadlineSeconds"] == 7200
    (node,) = patch["trainingRuntimeSpec"]["template"]["spec"]["replicatedJobs"]
    pod = node["template"]["spec"]["template"]["spec"]
    labels = node["template"]["spec"]["template"]["metadata"]["labels"]
    assert labels == {"sidecar.istio.io/inject": "false"}  # as every pod of the stack
    assert node["name"] == "node" and pod["nodeSelector"] == spec.node_selector
    assert pod["tolerations"] == spec.tolerations
    env = {e["name"]: e for e in pod["containers"][0]["env"]}
    for key in SECRET_KEYS:
        assert env[key]["valueFrom"]["secretKeyRef"]["name"] == SECRET
        assert "value" not in env[key]  # no secret's value in the TrainJob
    assert "value" not in json.dumps(list(env.values())).replace("valueFrom", "")
    # the loader's workers get more than a pod's 64 MB of /dev/shm
    assert pod["volumes"] == [{"name": "dshm", "emptyDir": {"medium": "Memory"}}]
    assert pod["containers"][0]["volumeMounts"] == [{"name": "dshm", "mountPath": "/dev/shm"}]


def test_a_cluster_without_the_trainjob_api_is_named(monkeypatch):
    from kubernetes import client

    groups = types.SimpleNamespace(groups=[types.SimpleNamespace(name="batch")])
    monkeypatch.setattr(client.ApisApi, "get_api_versions", lambda self: groups)
    with pytest.raises(trainjob.TrainJobError, match="no TrainJob API.*Trainer v2.3"):
        trainjob.check_trainjob_api()


def test_no_cluster_at_all_is_named_with_the_way_to_run_locally(monkeypatch, tmp_path):
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "none"))
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(trainjob.TrainJobError, match="no Kubernetes cluster.*=container"):
        trainjob.make_client("kubernetes")


def test_an_unknown_backend_is_refused_by_name(monkeypatch):
    monkeypatch.setenv(trainjob.BACKEND_ENV, "slurm")
    with pytest.raises(trainjob.TrainJobError, match="SHDH_TRAINJOB_BACKEND='slurm'"):
        trainjob.backend_name()


def test_processes_and_their_resources():
    train = {"nodes": 2, "processes_per_node": 4}
    assert processes(train) == 8 and processes({}) == 1
    assert node_resources(train, {"cpu": "8"}, gpu=True) == {"cpu": "8", "gpu": 4}
    with pytest.raises(ConfigError, match="processes_per_node=4: several processes on a node"):
        node_resources(train, {}, gpu=False)


def test_the_one_process_front_doors_refuse_several_processes():
    with pytest.raises(ConfigError, match="shdh train .*train.nodes=2.*trainjob task"):
        refuse_several_processes({"nodes": 2, "processes_per_node": 1}, "shdh train")
    refuse_several_processes({"nodes": 1, "processes_per_node": 1}, "shdh train")
    settings = json.dumps({**_train_section(), "nodes": 3})
    with pytest.raises(ConfigError, match="the train component fits in one process"):
        fit_component(
            prepared=None,
            similarity=None,
            method="shdh",
            bits=16,
            own_seed=-1,
            settings=settings,
            seed=0,
            profile="",
            pipeline_run_id="r",
            model=None,
        )


def _train_section() -> dict:
    from shdh.kubeflow import resolve_params
    from tests.conftest import REPO

    return resolve_params(REPO / "params.yaml")["train"]
