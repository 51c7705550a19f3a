"""shdh register: the best encoder of a pipeline run into the Model Registry, under an alias.

    shdh register                       # the pipeline run of params.yaml (after dvc repro)
    shdh register --run-id PARENT_ID    # any pipeline run, e.g. a Kubeflow one
    shdh register --metric wr_at_1000 --name my-encoder --alias staging
    shdh register --record artifacts/register/registered.json   # what dvc repro runs

The model is then loaded back by its alias (models:/NAME@ALIAS) and encodes its own input
example, so a registered version is known to load where shdh is installed.
"""

from __future__ import annotations

import argparse
import dataclasses
import json

from shdh.commands.common import add_params_argument, dvc_pipeline_id, script_main
from shdh.runtime.atomic import atomic_write_text, check_writable
from shdh.tracking import model_registry, parent_run

HELP = "register the best encoder of a pipeline run in the MLflow Model Registry, with an alias"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)
    parser.add_argument(
        "--run-id",
        help="the pipeline's parent run (default: the pipeline run "
        "of --params, as dvc repro tracked it)",
    )
    parser.add_argument(
        "--metric",
        default=model_registry.DEFAULT_METRIC,
        help=f"the highest wins (default: {model_registry.DEFAULT_METRIC})",
    )
    parser.add_argument(
        "--name",
        default=model_registry.DEFAULT_MODEL_NAME,
        help=f"registered model name (default: {model_registry.DEFAULT_MODEL_NAME})",
    )
    parser.add_argument(
        "--alias",
        default=model_registry.DEFAULT_ALIAS,
        help=f"alias set on the new version (default: {model_registry.DEFAULT_ALIAS})",
    )
    parser.add_argument(
        "--record",
        metavar="PATH",
        help="also write what was registered (name, version, alias, run name, metric) as JSON: "
        "the output by which DVC runs the index step after this one",
    )


def run(args: argparse.Namespace) -> int:
    if args.record:
        check_writable(args.record, "--record")
    parent = args.run_id or parent_run.parent_of_pipeline(dvc_pipeline_id(args.params))
    done = model_registry.register_best(parent, args.name, metric=args.metric, alias=args.alias)
    print(
        f"registered {done.run_name} ({done.metric} = {done.value:.4f}) as {done.name} "
        f"version {done.version}, alias @{done.alias}"
    )
    # the model the run just logged, in the environment that logged it: no requirements check
    loaded = model_registry.load_by_alias(done.name, done.alias, check_environment=False)
    n, width = model_registry.check_loaded(loaded)
    print(f"loaded {done.uri}: {n} example images -> {width}-byte codes")
    if args.record:
        atomic_write_text(args.record, json.dumps(record_of(done), indent=2) + "\n")
    return 0


def record_of(done: model_registry.Registered) -> dict[str, object]:
    """What --record writes: the registration without its run id. The file is a DVC output, so
    the same result must give the same bytes, and the run id is new on every run of the same
    pipeline (a fresh clone's `make run` would leave dvc.lock modified); the registry's name and
    version name the run."""
    return {k: v for k, v in dataclasses.asdict(done).items() if k != "run_id"}


def main(argv=None) -> int:
    return script_main(HELP, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
