"""One deep fit over several nodes, as a Kubeflow Trainer v2 TrainJob through the Kubeflow
SDK (PyPI `kubeflow`, kubeflow.trainer.TrainerClient): the Kubeflow DAG's `trainjob` task
launches it and waits, and every process of the job trains the fit under torchrun.

Trainer's `torch-distributed` runtime starts torchrun on every node (PET_NNODES, PET_NODE_RANK,
PET_MASTER_ADDR, ...), which runs the function the SDK was given on each process: `node_main`,
whose source the SDK copies into the job, so it only imports the installed package. Two
backends run the same job: `kubernetes` (a cluster with Trainer v2.3+: the TrainJob API and a
ClusterTrainingRuntime `torch-distributed`) and `container` (Docker on this host, one container
per node on a bridge network: how the project tests a two-node job without a cluster, and how
a user tries one). SHDH_TRAINJOB_BACKEND chooses; kubernetes is the default.

The step's pod and the job's nodes share no disk, so they meet in the object store, at the
fit's folder of the checkpoint store (SHDH_CHECKPOINT_URL/RUN/FIT/,
shdh.tracking.checkpoint_sync): the step stages the job's inputs (the prepared dataset, the
S-matrix) once by their content, for every fit that needs them (SHDH_CHECKPOINT_URL/inputs/,
shdh.tracking.staging), and puts what the fit is and where its inputs are (job.json) under
job/; the nodes fetch them and train; rank 0 uploads every epoch's checkpoint to the fit's
folder, as a one-process fit does, and every rank restores it when the job runs again; rank 0
alone opens the fit's MLflow run, under the pipeline's parent run, and puts the fitted model
folder under job/model/, which the step copies into its Model artifact. Trainer keeps no
checkpoints of its own, so a failed job is simply launched again: its name is fixed by the fit,
and a launch first removes the job a killed step left behind.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import signal
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shdh.kubeflow import fit_name, own_seed_arg, run_context, save_model, section_arg
from shdh.plan.all_methods import fit_plan
from shdh.plan.fits import WORK_DIR
from shdh.plan.processes import node_resources
from shdh.runtime.errors import ConfigError
from shdh.tracking import checkpoint_sync, cluster_env
from shdh.tracking.cluster_env import SHM_PATH, SHM_VOLUME
from shdh.tracking.staging import fetch, get_tree, put_tree, stage

log = logging.getLogger(__name__)

BACKEND_ENV = "SHDH_TRAINJOB_BACKEND"
BACKENDS = ("kubernetes", "container")
RUNTIME = "torch-distributed"  # Trainer's runtime that runs torchrun on every node
TRAINER_GROUP = "trainer.kubeflow.org"
POLL_S = 5
JOB_DIR = "job"  # under the fit's folder of the checkpoint store
REQUEST = "job.json"
WAIT_S = 30 * 24 * 3600  # the step's own deadline (train.timeout on a cluster) ends it first


class TrainJobError(RuntimeError):
    """The TrainJob could not be created, or it failed (the message holds the job's reason)."""


@dataclass(frozen=True)
class JobSpec:
    """One TrainJob: its name, the image of every node, the node count, and what each node
    gets: resources (`gpu` sets the processes per node), plain variables, variables read from
    ConfigMaps and Secrets (Kubernetes EnvVar entries), where it is scheduled."""

    name: str
    image: str
    nodes: int
    resources_per_node: dict[str, Any] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    env_refs: list[dict] = field(default_factory=list)
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict] = field(default_factory=list)
    deadline_seconds: int | None = None  # the job's own (train.timeout): its nodes stop there


def job_name(*parts: str) -> str:
    """A TrainJob name (a DNS-1035 label, short enough for the pods' names) fixed by parts."""
    digest = hashlib.sha256("/".join(parts).encode()).hexdigest()[:16]
    return f"shdh-{digest}"


def node_main(job_url: str) -> None:
    """What torchrun runs on every process of the job (its source is copied into the job:
    it may only import the installed package)."""
    from shdh.runtime.instruction_set import pin_cpu

    pin_cpu()  # before numpy and torch load: the same bits on every CPU

    import logging
    import os

    from shdh.trainjob import run_node

    rank = os.environ.get("RANK", "0")
    logging.basicConfig(
        level=logging.INFO, format=f"[rank {rank}] %(levelname)s %(name)s: %(message)s"
    )
    run_node(job_url)


def backend_name() -> str:
    name = os.environ.get(BACKEND_ENV, "kubernetes").strip() or "kubernetes"
    if name not in BACKENDS:
        raise TrainJobError(f"{BACKEND_ENV}={name!r}: expected one of {', '.join(BACKENDS)}")
    return name


def make_client(backend: str) -> Any:
    """A TrainerClient for the backend; on Kubernetes, only after checking that the cluster
    serves the TrainJob API, so that a cluster without Trainer fails here, by name."""
    try:
        from kubeflow.common.types import KubernetesBackendConfig
        from kubeflow.trainer import ContainerBackendConfig, TrainerClient, TrainingRuntimeSource
    except ImportError as exc:
        raise TrainJobError(
            f"the Kubeflow SDK is not installed ({exc}): pip install 'kubeflow[docker]==0.5.0'"
        ) from exc
    if backend == "container":
        # No runtime sources: the SDK's built-in torch-distributed (GitHub is not reached),
        # the image given per job, never pulled: it is the one built here.
        config = ContainerBackendConfig(
            pull_policy="Never", runtime_source=TrainingRuntimeSource(sources=[])
        )
        return TrainerClient(backend_config=config)
    try:  # the pod's own account in a cluster, else the kubeconfig's current context
        client = TrainerClient(backend_config=KubernetesBackendConfig())
    except Exception as exc:  # noqa: BLE001 (kubernetes' config errors have no common base)
        raise TrainJobError(
            f"no Kubernetes cluster to create the TrainJob in ({type(exc).__name__}: {exc}): "
            "run the step in the cluster or where kubectl reaches it, or set "
            f"{BACKEND_ENV}=container to run the job on this host's Docker"
        ) from exc
    check_trainjob_api()
    return client


def check_trainjob_api() -> None:
    """The cluster's API groups (discovery, open to every account) must hold Trainer's."""
    from kubernetes import client

    groups = {g.name for g in client.ApisApi().get_api_versions().groups}
    if TRAINER_GROUP not in groups:
        raise TrainJobError(
            f"this cluster has no TrainJob API ({TRAINER_GROUP} is not among its API groups): "
            "install Kubeflow Trainer v2.3 or later with its torch-distributed runtime "
            "(docs/cluster.md, 'Training on several GPUs'), or set train.nodes and "
            "train.processes_per_node to 1"
        )


def run_job(client: Any, spec: JobSpec, node_args: dict[str, Any], out: Callable = print) -> None:
    """Create the job, stream its nodes' logs through `out`, wait for its end and delete it;
    raise TrainJobError with the job's reason when it failed."""
    from kubeflow.trainer import CustomTrainer
    from kubeflow.trainer.options.common import Name

    _remove(client, spec.name, "left by an earlier try")
    trainer = CustomTrainer(
        func=node_main,
        func_args=node_args,
        image=spec.image,
        num_nodes=spec.nodes,
        resources_per_node=spec.resources_per_node or None,
        env=spec.env or None,
    )
    options = [Name(spec.name), *_cluster_options(client, spec)]
    log.info("TrainJob %s: %d node(s) of %s", spec.name, spec.nodes, spec.image)
    with _sigterm_raises():
        try:
            client.train(runtime=RUNTIME, trainer=trainer, options=options)
        except Exception as exc:  # the SDK wraps API refusals (RBAC, admission) in bare errors
            raise TrainJobError(f"TrainJob {spec.name} could not be created: {exc}") from exc
        try:
            running = {"Running", "Complete", "Failed"}
            client.wait_for_job_status(spec.name, running, timeout=WAIT_S, polling_interval=POLL_S)
            for line in client.get_job_logs(spec.name, follow=True):  # node 0's: rank 0 logs
                out(line.rstrip("\n"))
            _wait_for_end(client, spec.name)
        finally:
            _remove(client, spec.name, "done")


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """SIGTERM as SystemExit while the job runs. Kubernetes stops the step's pod with SIGTERM
    (its deadline, a terminated pipeline run), which by default ends Python without running
    `finally`: the job would be left running, holding its nodes' GPUs, until its own deadline."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers belong to the main thread; a caller elsewhere keeps its own
        return

    def stop(signum: int, frame: Any) -> None:
        raise SystemExit(128 + signum)

    previous = signal.signal(signal.SIGTERM, stop)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _wait_for_end(client: Any, name: str) -> None:
    try:
        client.wait_for_job_status(name, {"Complete"}, timeout=WAIT_S, polling_interval=POLL_S)
    except RuntimeError as exc:  # a Failed job; the container backend's message has its logs
        raise TrainJobError(f"{exc}{_events(client, name)}") from exc


def _events(client: Any, name: str) -> str:
    """The job's Kubernetes events (the scheduler's and the controller's reasons), if any."""
    try:
        events = client.get_job_events(name)
    except Exception:  # noqa: BLE001 (the container backend has none)
        return ""
    return "".join(f"\n  {e.involved_object_name}: {e.reason}: {e.message}" for e in events)


def _remove(client: Any, name: str, why: str) -> None:
    try:
        client.get_job(name)
    except Exception:  # noqa: BLE001 (no such job: the usual case)
        return
    log.info("TrainJob %s: deleting (%s)", name, why)
    client.delete_job(name)


def _cluster_options(client: Any, spec: JobSpec) -> list[Any]:
    """On Kubernetes, a runtime patch of the nodes' pods: the ConfigMap and Secret variables
    by reference (no value in the TrainJob), shared memory for the loader's workers, the GPU
    nodes' selector and tolerations, no Istio sidecar; and the job's own deadline."""
    from kubeflow.trainer.backends.kubernetes.backend import KubernetesBackend

    if not isinstance(client.backend, KubernetesBackend):
        return []
    from kubeflow.trainer.options import kubernetes as k8s

    shm = [{"name": SHM_VOLUME, "mountPath": SHM_PATH}]
    node = k8s.ContainerPatch(name="node", env=spec.env_refs or None, volume_mounts=shm)
    pod = k8s.PodSpecPatch(
        volumes=[{"name": SHM_VOLUME, "emptyDir": {"medium": "Memory"}}],
        containers=[node],
        node_selector=spec.node_selector or None,
        tolerations=spec.tolerations or None,
    )
    # No Istio sidecar, as on every pod of the stack (k8s/base/kustomization.yaml): in a Kubeflow
    # profile's namespace one would keep each node's pod running after training, and the job
    # would never end.
    no_sidecar = {"labels": {"sidecar.istio.io/inject": "false"}}
    template = k8s.PodTemplatePatch(metadata=no_sidecar, spec=pod)
    job = k8s.JobTemplatePatch(spec=k8s.JobSpecPatch(template=template))
    nodes = k8s.ReplicatedJobPatch(name="node", template=job)
    jobset = k8s.JobSetTemplatePatch(spec=k8s.JobSetSpecPatch(replicated_jobs=[nodes]))
    patch = k8s.RuntimePatch(training_runtime_spec=k8s.TrainingRuntimeSpecPatch(template=jobset))
    if spec.deadline_seconds is None:
        return [patch]
    # A step killed without warning (SIGKILL, a lost node) cannot delete its job: the job's own
    # deadline still stops its nodes.
    return [patch, k8s.ActiveDeadlineSeconds(int(spec.deadline_seconds))]


def stream(line: str) -> None:
    """A node's log line into the step's own log."""
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def launch(
    *,
    prepared: Any,
    similarity: Any,
    run: dict[str, Any],
    settings: str,
    seed: int,
    profile: str,
    pipeline_run_id: str,
    nodes: dict[str, Any],
    model: Any,
) -> None:
    """The train step's work when a fit has several processes: stage the inputs, run the
    TrainJob to its end (its nodes' logs in this step's), copy the fitted model back.

    run: the fit ({method, bits, own_seed}); nodes: where and how its nodes run ({image,
    resources, node_selector, tolerations}, from the cluster settings)."""
    section = section_arg(settings, "train")
    name = fit_name(run)
    root = checkpoint_sync.store_url()
    if root is None:
        raise ConfigError(
            f"train.nodes={section['nodes']}, train.processes_per_node="
            f"{section['processes_per_node']}: a TrainJob's nodes meet the step in the object "
            f"store; set {checkpoint_sync.STORE_ENV} (s3://bucket/prefix; on a cluster the "
            "ConfigMap shdh-config holds it)"
        )
    backend = backend_name()
    client = make_client(backend)  # a cluster without the TrainJob API fails before any upload
    job = checkpoint_sync.StoreFolder(f"{root}/{pipeline_run_id}/{name}/{JOB_DIR}")
    request = {
        "run": run,
        "settings": settings,
        "seed": seed,
        "profile": profile,
        "pipeline_run_id": pipeline_run_id,
        "metadata": dict(prepared.metadata),
        "prepared": stage(root, Path(prepared.path), "prepared"),
        "similarity": stage(root, Path(similarity.path), "similarity"),
    }
    with tempfile.TemporaryDirectory(prefix="shdh-job-") as tmp:
        path = Path(tmp, REQUEST)
        path.write_text(json.dumps(request, indent=2) + "\n")
        put_tree(job, path, "request")
        spec = JobSpec(
            name=job_name(pipeline_run_id, name),
            image=str(nodes["image"]),
            nodes=int(section["nodes"]),
            resources_per_node=node_resources(
                section, nodes.get("resources") or {}, bool(nodes.get("gpu"))
            ),
            env=cluster_env.env_values() if backend == "container" else {},
            env_refs=cluster_env.env_references() if backend == "kubernetes" else [],
            node_selector=nodes.get("node_selector") or {},
            tolerations=nodes.get("tolerations") or [],
            deadline_seconds=nodes.get("deadline_seconds"),
        )
        run_job(client, spec, {"job_url": job.url}, stream)
        fitted = get_tree(job, "model", Path(tmp, "model"))
        save_model(fitted, model)


def run_node(job_url: str) -> None:
    """What every process of the job runs: fetch the inputs, train the fit (rank 0 keeps it).
    The training imports here: the launching step never trains."""
    from shdh.steps.fit_deep import fit
    from shdh.training.distributed import World

    world = World.from_env()
    job = checkpoint_sync.StoreFolder(job_url)
    with tempfile.TemporaryDirectory(prefix="shdh-node-") as tmp:
        request = json.loads((get_tree(job, "request", Path(tmp, "request")) / REQUEST).read_text())
        run = request["run"]
        plan = fit_plan(
            section_arg(request["settings"], "train"),
            run["method"],
            int(run["bits"]),
            own_seed_arg(run["own_seed"]),
            seed=int(request["seed"]),
            models_root=Path(tmp, "models"),
        )
        inputs = _fetch_inputs(request)
        context = (
            run_context(request["metadata"], request["profile"], request["pipeline_run_id"])
            if world.main
            else {}
        )
        checkpoints = checkpoint_sync.FitCheckpoints(job_url.rsplit("/", 1)[0])
        log.info("rank %d of %d: fitting %s", world.rank, world.size, plan.name)
        out = fit(plan, **inputs, progress=False, resume="auto", checkpoints=checkpoints, **context)
        if world.main:
            kept = Path(tmp, "kept")
            shutil.copytree(out, kept, ignore=shutil.ignore_patterns(WORK_DIR))
            put_tree(job, kept, "model")


def _fetch_inputs(request: dict[str, Any]) -> dict[str, Path]:
    """The prepared dataset and the S-matrix, as local paths (one copy per node)."""
    keys = (("prepared", "prepared_dir"), ("similarity", "smatrix_path"))
    return {arg: fetch(request[key]) for key, arg in keys}
