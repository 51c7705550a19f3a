"""What a task needs on a Kubernetes cluster and nowhere else: settings, credentials, sizes, a GPU.

MLflow's address and the S3 endpoint come from the ConfigMap `shdh-config`, the S3 credentials
from the Secret `shdh-credentials` (k8s/base; k8s/secret.example.yaml shows the keys), as
environment variables through kfp-kubernetes. The compiled YAML names them and holds no value.

Sizes, retries, the timeout, loop caps and where the train tasks run come from the cluster's
settings (pipelines.cluster_settings: the ConfigMap `shdh-pipeline` of the overlay the user names).
On settings with a GPU the train tasks also run in the CUDA image and train with `device: cuda`,
so that a node without a usable GPU fails the step at once instead of training on the CPU.

None of this is applied to the pipeline kfp.local runs: it has no Kubernetes, warns that an
accelerator request has no effect there, and takes its environment from the calling shell.
"""

from __future__ import annotations

import copy
from pathlib import PurePosixPath
from typing import Any

from shdh.kfp.pipelines.cluster_settings import ClusterSettings
from shdh.nets.pretrained import NONE, REMOTE_SCHEMES, is_torchvision_name
from shdh.plan.processes import node_resources, processes
from shdh.tracking.cluster_env import (  # noqa: F401
    CONFIG_KEYS,
    CONFIG_MAP,
    SECRET,
    SECRET_KEYS,
    SHM_PATH,
    SHM_VOLUME,
)

# The Milvus user's token (k8s/components/milvus): the index task's, with index.engine milvus.
MILVUS_SECRET = "shdh-milvus-credentials"


def use_cluster_settings(task: Any) -> Any:
    """Environment from the ConfigMap and the Secret, by reference."""
    from kfp import kubernetes

    kubernetes.use_config_map_as_env(task, CONFIG_MAP, {key: key for key in CONFIG_KEYS})
    kubernetes.use_secret_as_env(task, SECRET, {key: key for key in SECRET_KEYS})
    return task


def step_name(task: Any) -> str:
    """The component a task runs (`train` for the tasks train, train-2, ...)."""
    return task.component_spec.name


def apply_resources(task: Any, settings: ClusterSettings) -> Any:
    """CPU and memory requests and limits of the task's step; the image pull Secrets."""
    from kfp import kubernetes

    if settings.image_pull_secrets:
        kubernetes.set_image_pull_secrets(task, settings.image_pull_secrets)
    sizes = settings.resources[step_name(task)]
    task.set_cpu_request(sizes.cpu_request).set_cpu_limit(sizes.cpu_limit)
    task.set_memory_request(sizes.memory_request).set_memory_limit(sizes.memory_limit)
    return task


def apply_training(task: Any, settings: ClusterSettings, gpu_image: str) -> Any:
    """Retries with backoff and a deadline per try (apply_retries), shared memory for the
    loader's workers (cluster_env.SHM_VOLUME); on GPU settings the accelerator, node selector,
    tolerations and the CUDA image."""
    from kfp import kubernetes

    apply_retries(task, settings)
    kubernetes.empty_dir_mount(task, SHM_VOLUME, SHM_PATH, medium="Memory")
    for label, value in settings.node_selector.items():
        kubernetes.add_node_selector(task, label, value)
    for toleration in settings.toleration_arguments():
        kubernetes.add_toleration(task, **toleration)
    if settings.gpu:
        task.set_accelerator_type(settings.accelerator_type)
        task.set_accelerator_limit(settings.accelerator_limit)
        task.set_container_image(gpu_image)
    return task


def apply_retries(task: Any, settings: ClusterSettings) -> Any:
    """The train tasks' retries with backoff and deadline per try.

    The backend honours the retries of a task of the root DAG only (it ignores them inside a
    ParallelFor, which is why each fit is a task of its own), and retries a failed container,
    not an evicted or deleted pod: no retry policy reaches Argo, whose default is OnFailure.
    `shdh pipeline retry` is the answer to those."""
    from kfp import kubernetes

    retry = settings.retry
    task.set_retry(
        num_retries=retry.retries,
        backoff_duration=f"{retry.backoff_seconds}s",
        backoff_factor=retry.factor,
        backoff_max_duration=f"{retry.max_backoff_seconds}s",
    )
    kubernetes.set_timeout(task, settings.timeout_seconds)
    return task


def trainjob_nodes(
    train: dict[str, Any], settings: ClusterSettings | None, image: str, gpu_image: str
) -> dict[str, Any] | None:
    """Where the nodes of a fit's TrainJob run (the trainjob component's `nodes`): the train
    tasks' image, CPU and memory limits, GPU, node selector and tolerations, one GPU per
    process; None when a fit has one process (the plain train task). A local run's nodes get
    the runtime image and no sizes."""
    if processes(train) == 1:
        return None
    if settings is None:
        node_resources(train, {}, gpu=False)
        return {"image": image, "gpu": False, "resources": {}}
    sizes = settings.resources["train"]
    resources = {"cpu": sizes.cpu_limit, "memory": sizes.memory_limit}
    return {
        "image": gpu_image if settings.gpu else image,
        "gpu": settings.gpu,
        "resources": node_resources(train, resources, settings.gpu),
        "node_selector": dict(settings.node_selector),
        "tolerations": list(settings.tolerations),
        "deadline_seconds": settings.timeout_seconds,
    }


def train_device(params: dict[str, Any], settings: ClusterSettings) -> dict[str, Any]:
    """params with `train.device` as the cluster's train nodes need it: `cuda` where the
    settings give each train task a GPU, `cpu` where they give none. `auto` is resolved here;
    a device that contradicts the settings is refused, naming both; so are weights that only
    this machine has (check_weights_reachable)."""
    check_weights_reachable(params["train"])
    wanted = str(params["train"].get("device", "auto"))
    if wanted not in ("auto", settings.device):
        has = "a GPU" if settings.gpu else "no GPU"
        raise ValueError(
            f"params train.device is {wanted!r}, but {settings.source} gives each train task "
            f"{has}: set train.device to auto or {settings.device!r}, or name an overlay "
            f"{'without' if settings.gpu else 'with'} a GPU (--overlay)"
        )
    settled = copy.deepcopy(params)
    settled["train"]["device"] = settings.device
    return settled


def check_weights_reachable(train: dict[str, Any]) -> None:
    """A relative `train.pretrained` path names a file on this machine, which no pod of the
    cluster has: refused when the pipeline is compiled, not by every try of every train task
    after the data steps. An absolute path may be inside the user's own image, and a
    torchvision name in its TORCH_HOME cache; those the train step checks."""
    spec = str(train.get("pretrained", NONE))
    if spec == NONE or spec.startswith(REMOTE_SCHEMES) or is_torchvision_name(spec):
        return
    if not PurePosixPath(spec).is_absolute():
        raise ValueError(
            f"params train.pretrained is {spec!r}, a file on this machine that the cluster's "
            f"train pods cannot read: copy it to the object store (aws s3 cp {spec} "
            "s3://BUCKET/weights/) and set train.pretrained to that s3:// URL with "
            "train.pretrained_sha256, or give an absolute path inside your own image"
        )
