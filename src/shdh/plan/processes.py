"""How many processes train one deep fit: train.nodes x train.processes_per_node. One is the
plain train step; more is a Kubeflow TrainJob (shdh.trainjob), which only the Kubeflow DAG
launches."""

from __future__ import annotations

from typing import Any

from shdh.runtime.errors import ConfigError


def processes(section: dict[str, Any]) -> int:
    """How many processes train one fit of the `train` section."""
    return int(section.get("nodes", 1)) * int(section.get("processes_per_node", 1))


def node_resources(section: dict[str, Any], resources: dict[str, Any], gpu: bool) -> dict:
    """The Kubeflow SDK's resources_per_node: the train step's CPU and memory, and on GPU
    nodes one GPU per process (the SDK starts as many processes a node as it has GPUs)."""
    per_node = int(section.get("processes_per_node", 1))
    if per_node > 1 and not gpu:
        raise ConfigError(
            f"train.processes_per_node={per_node}: several processes on a node need a GPU each; "
            "a CPU node trains with one process using all its cores (raise train.nodes instead)"
        )
    return {**resources, **({"gpu": per_node} if gpu else {})}


def refuse_several_processes(section: dict[str, Any], where: str) -> None:
    """A fit of several processes runs as a TrainJob, never inside a one-process front door."""
    if processes(section) > 1:
        raise ConfigError(
            f"{where} fits in one process, but train.nodes={section['nodes']} and "
            f"train.processes_per_node={section['processes_per_node']}: a fit of several "
            "processes runs as a Kubeflow TrainJob, which the pipeline's trainjob task "
            "launches (shdh pipeline run/submit); set both to 1 for this front door"
        )
