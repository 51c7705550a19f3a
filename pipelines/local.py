"""Run the whole pipeline here, with kfp.local's SubprocessRunner in the current environment.

Each task runs as a subprocess of this Python (use_venv=False: the installed shdh, no pip), so
the run needs no cluster, no container engine and no network. The pipeline is built without
its cluster settings (no GPU request, ConfigMap or Secret): MLflow settings come from this
shell's environment, as for `dvc repro`.
"""

from __future__ import annotations

import builtins
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipelines.shdh_pipeline import build_pipeline
from shdh.kubeflow import pipeline_arguments


@dataclass(frozen=True)
class LocalRun:
    """Where a local run left its outputs, and the scores it wrote."""

    results_dir: Path  # metrics.json, timings.json, table.md, codes/, plots/
    report: Path  # the Markdown report
    metrics: dict[str, Any]  # metrics.json: {method: {bits: {metric: value}}}
    table: str  # table.md


def run_local(params: dict[str, Any], root: str | Path) -> LocalRun:
    """Run the DAG for `params` under root (a folder per run); fails fast, naming the URI, when
    the MLflow tracking server cannot be reached.

    builtins.print is put back afterwards: kfp.local swaps it for an indenting wrapper around
    each task and restores it last-in-first-out, but it runs a ParallelFor's tasks in threads,
    so interleaved restores can leave a task's wrapper installed for the rest of the process
    (numba, imported later by shdh.retrieval, then refuses to load)."""
    from kfp import local

    from shdh import tracking

    tracking.check_server(tracking.tracking_uri())
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    local.init(
        runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(root), raise_on_error=True
    )
    print_before = builtins.print
    try:
        task = build_pipeline(params)(**pipeline_arguments(params))
    finally:
        builtins.print = print_before
    results_dir = Path(task.outputs["results"].path)
    return LocalRun(
        results_dir=results_dir,
        report=Path(task.outputs["report"].path),
        metrics=json.loads((results_dir / "metrics.json").read_text()),
        table=(results_dir / "table.md").read_text(),
    )
