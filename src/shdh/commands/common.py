"""What every step command shares: the --params flag, the checked settings and running a step
as a script.

Every step reads params.yaml through `params_section`, which validates the whole file (every
section and key, shdh.settings) and where the results go (shdh.settings.locations) before the
step does any work: DVC runs these same commands.
"""

from __future__ import annotations

import argparse
import logging
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import yaml

from shdh import settings
from shdh.settings.locations import check_results_location, dataset_label


def add_params_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--params", default="params.yaml", help="settings file (default: params.yaml)"
    )


def load_settings(args: argparse.Namespace) -> settings.Settings:
    """The params file, validated, with a results location that is this run's own."""
    checked = settings.load(args.params)
    check_results_location(checked.params, args.params)
    return checked


def params_section(args: argparse.Namespace, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The whole params file and one of its sections, both validated."""
    checked = load_settings(args)
    return checked.params, checked.section(name)


def run_tags(params: dict[str, Any]) -> dict[str, str]:
    """MLflow tags that let runs be filtered by dataset, profile, data version and pipeline run.
    The dataset is named as its results folder is (`shapes`, not the reader `folder`), so that
    runs on two datasets of your own can be told apart."""
    return {
        "dataset": dataset_label(params["data"]),
        "profile": str(params.get("profile", "")),
        "dvc_data_md5": data_hash(),
    }


def data_hash(dvc_file: str | Path = "data.dvc") -> str:
    """The raw data's DVC hash (data.dvc), so a run can be traced to the exact data."""
    try:
        outs = yaml.safe_load(Path(dvc_file).read_text())["outs"]
        return str(outs[0]["md5"])
    except (OSError, KeyError, IndexError, TypeError, yaml.YAMLError):
        return "unknown"


DVC_SOURCE = "dvc.yaml"  # the source name of DVC's runs in the UI
HAND_SOURCE = "shdh"  # the source name of a step run by hand
DVC_STAGE_ENV = "DVC_STAGE"  # DVC names the stage in it for every command it runs


def dvc_pipeline_id(params_file: str | Path, data_md5: str | None = None) -> str:
    """The pipeline run id of the DVC stages run with params_file and the data of data.dvc
    (data_md5, when the caller has read it already)."""
    from shdh.tracking import mlflow_runs as tracking

    return tracking.pipeline_run_id(Path(params_file).read_text(), data_md5 or data_hash())


def by_hand() -> bool:
    """A step run by hand: not by DVC, and under no pipeline run id given explicitly (Kubeflow
    gives one; so may a user, to gather hand-run steps under one parent)."""
    from shdh.tracking.mlflow_runs import PIPELINE_ID_ENV

    return not (os.environ.get(DVC_STAGE_ENV) or os.environ.get(PIPELINE_ID_ENV))


def pipeline_context(args: argparse.Namespace, params: dict[str, Any]) -> dict[str, Any]:
    """Tags and the parent MLflow run shared by every step of one pipeline run; the first
    tracked stage opens the parent with the settings as its params.

    A step run by hand is no stage of the pipeline run whose settings it shares: its id would
    find that run's parent, finished by its evaluate, reopen it RUNNING for good and add the
    hand-made fits to its comparison view. It gets a parent of its own instead, which the command
    closes when it ends (end_hand_run)."""
    from shdh.tracking import mlflow_runs as tracking
    from shdh.tracking import parent_run

    if by_hand():
        tags = {**run_tags(params), **tracking.source_tags(HAND_SOURCE, "LOCAL")}
        return parent_run.hand_run_context(tags, params)
    tags = {**run_tags(params), **tracking.source_tags(DVC_SOURCE, "LOCAL")}
    run_id = dvc_pipeline_id(args.params, tags["dvc_data_md5"])
    return parent_run.pipeline_context(run_id, tags, params)


def end_hand_run(context: dict[str, Any] | None) -> None:
    """Close the parent of a step run by hand once its work is done (a pipeline's parent stays
    open for the pipeline's later stages; its evaluate closes it)."""
    from shdh.tracking import mlflow_runs as tracking
    from shdh.tracking import parent_run

    if context is not None and parent_run.is_hand_run(context):
        tracking.end_parent(context["parent_run_id"])


def setup_logging(verbose: bool = False) -> None:
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def script_main(
    description: str, add_arguments: Callable, run: Callable, argv: Sequence[str] | None = None
) -> int:
    parser = argparse.ArgumentParser(description=description)
    add_arguments(parser)
    args = parser.parse_args(argv)
    setup_logging()
    return run(args) or 0
