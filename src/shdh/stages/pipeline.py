"""shdh pipeline: the Kubeflow front door: compile the DAG, run it locally, submit it to a cluster.

    shdh pipeline compile [--overlay NAME] [--profile P] [--param KEY=VALUE ...] [--out FILE]
    shdh pipeline run --local [--profile smoke]
    shdh pipeline submit --host URL [--overlay NAME] [--namespace NS] [--token-file FILE] ...

The DAG (pipelines/) and its components (components/) live in the repository rather than in the
installed package: compiling needs a checkout, the components' containers need only the package.
Settings come from params.yaml and profiles/ through shdh.config, as for DVC, so a profile name
selects the same values in both front doors.

The second half of this module is the glue the components call inside their containers: a
component's body is serialised alone into the pipeline YAML, so whatever two components share
must live in the installed package.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import yaml

from shdh import settings
from shdh.atomic import atomic_dir
from shdh.config import PROFILES_DIR, ConfigError, deep_merge, load_params, profile_path
from shdh.stages.common import script_main

HELP = "Kubeflow Pipelines: compile the DAG, run it locally (kfp.local) or submit it to a cluster"
log = logging.getLogger(__name__)

# The params.yaml sections that become pipeline parameters, one each (plus seed and profile).
SECTIONS = ("data", "tree", "smatrix", "features", "train", "baselines", "evaluate")
DEFAULT_OUT = "artifacts/pipeline.yaml"  # a build product, like the other artifacts
DEFAULT_LOCAL_ROOT = "artifacts/kfp-local"
DEFAULT_EXPERIMENT = "shdh"
# Where submit finds credentials that should stay off the command line (shell history, ps).
TOKEN_ENV = "SHDH_KFP_TOKEN"
COOKIE_ENV = "SHDH_KFP_COOKIE"


# --------------------------------------------------------------------------- settings


def resolve_params(
    params_file: str | Path = "params.yaml",
    profile: str | None = None,
    overrides: Iterable[str] = (),
    profiles_dir: str | Path = PROFILES_DIR,
) -> dict[str, Any]:
    """params.yaml, with a profile's overrides and then `--param KEY=VALUE` ones applied.

    The same values `shdh profile apply P` would write into params.yaml, without rewriting it.
    Every key set must already exist in params.yaml, so a typo fails here, by name.
    """
    params = load_params(params_file)
    if profile:
        path = profile_path(profile, profiles_dir)
        extra = load_params(path)
        _check_known(params, extra, str(path))
        params = deep_merge(params, {**extra, "profile": profile})
    for text in overrides:
        key, value = parse_override(text)
        set_setting(params, key, value, f"--param {text}")
    return settings.validate(params, params_file).params


def _check_known(base: dict[str, Any], extra: dict[str, Any], where: str, prefix: str = "") -> None:
    for key, value in extra.items():
        if key not in base:
            raise ConfigError(f"{where}: sets unknown key '{prefix}{key}' (not in params.yaml)")
        if isinstance(value, dict) and isinstance(base[key], dict):
            _check_known(base[key], value, where, f"{prefix}{key}.")


def parse_override(text: str) -> tuple[str, Any]:
    """'train.epochs=2' -> ('train.epochs', 2); the value is read as YAML ([32, 64], null, 0.1)."""
    key, sep, raw = text.partition("=")
    if not sep or not key.strip():
        raise ConfigError(f"--param {text}: expected KEY=VALUE, e.g. train.epochs=2")
    try:
        return key.strip(), yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise ConfigError(f"--param {text}: the value is not valid YAML: {exc}") from exc


def set_setting(params: dict[str, Any], key: str, value: Any, where: str) -> None:
    """Set a dotted key (train.epochs, baselines.ksh.n_anchors) that params.yaml already has."""
    *parents, last = key.split(".")
    node: Any = params
    for i, name in enumerate(parents):
        node = node.get(name) if isinstance(node, dict) else None
        if not isinstance(node, dict):
            raise ConfigError(f"{where}: params.yaml has no section '{'.'.join(parents[: i + 1])}'")
    if last not in node:
        raise ConfigError(f"{where}: params.yaml has no setting '{key}'")
    node[last] = value


def pipeline_arguments(params: dict[str, Any]) -> dict[str, Any]:
    """The pipeline's parameters: seed, profile and one JSON string per params.yaml section.

    Sections travel as JSON strings, not dicts: Kubeflow stores dict parameters as protobuf
    Structs, which turn every int into a float (epochs 1 -> 1.0, "shdh-16.0") and cannot hold
    null (max_items, n_train), so a dict would not reach the library as params.yaml wrote it.
    """
    return {
        "profile": str(params.get("profile") or ""),
        "seed": int(params["seed"]),
        **{name: json.dumps(params[name], sort_keys=True) for name in SECTIONS},
    }


# --------------------------------------------------------------------------- the repository


def project_root() -> Path:
    """The checkout that holds pipelines/ and components/: the working directory, else the one
    this package was installed from in editable mode."""
    candidates = [Path.cwd(), Path(__file__).resolve().parents[3]]
    for root in candidates:
        if (root / "pipelines" / "shdh_pipeline.py").is_file() and (root / "components").is_dir():
            return root
    raise ConfigError(
        f"shdh pipeline: no pipelines/shdh_pipeline.py in {candidates[0]} or {candidates[1]}; "
        "run it from a clone of the repository"
    )


def load_pipelines_package() -> Any:
    """Import pipelines/ (which imports components/) from the checkout: both are top-level
    folders of the repository, so the checkout goes on sys.path."""
    import importlib

    root = str(project_root())
    if root not in sys.path:
        sys.path.insert(0, root)
    return importlib.import_module("pipelines")


# --------------------------------------------------------------------------- the command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    compile_p = actions.add_parser("compile", help="write the pipeline YAML for a cluster")
    run_p = actions.add_parser("run", help="run the whole DAG here with kfp.local")
    submit_p = actions.add_parser("submit", help="upload the pipeline and start a run (kfp.Client)")
    for p in (compile_p, run_p, submit_p):
        p.add_argument("--params", default="params.yaml", help="settings file (params.yaml)")
        p.add_argument("--profile", help="apply profiles/NAME.yaml on top (smoke, default, ...)")
        p.add_argument("--param", action="append", default=[], metavar="KEY=VALUE",
                       help="override one setting, e.g. train.epochs=2 (repeatable)")  # fmt: skip
    for p in (compile_p, submit_p):
        add_cluster_arguments(p)
    compile_p.add_argument("--out", default=DEFAULT_OUT, help=f"output file ({DEFAULT_OUT})")
    run_p.add_argument(
        "--local",
        action="store_true",
        required=True,
        help="run with kfp.local's SubprocessRunner, in this environment",
    )
    run_p.add_argument("--root", default=DEFAULT_LOCAL_ROOT, help="where the artifacts go")
    add_submit_arguments(submit_p)


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    """Which image and which cluster settings a compiled pipeline is for."""
    parser.add_argument(
        "--image",
        help="the runtime image of every task, REGISTRY/NAME:TAG; GPU train tasks run TAG-cuda "
        "(default: $SHDH_IMAGE, else ghcr.io/shdh/shdh:VERSION)",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--overlay",
        help="take task sizes, retries and GPU scheduling from the ConfigMap shdh-pipeline of "
        "k8s/overlays/NAME (or of a kustomization folder), rendered with kubectl kustomize; "
        "default: dev (no GPU)",
    )
    where.add_argument(
        "--settings",
        metavar="FILE",
        help="take them from a file with that ConfigMap (kubectl get configmap shdh-pipeline "
        "-o yaml, or a rendered overlay)",
    )


def add_submit_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", required=True, help="Kubeflow Pipelines API URL")
    parser.add_argument("--experiment", default=DEFAULT_EXPERIMENT, help="experiment name")
    parser.add_argument("--run-name", help="run name (default: shdh-PROFILE-TIMESTAMP)")
    parser.add_argument("--namespace", help="Kubeflow profile namespace (multi-user installs)")
    parser.add_argument("--service-account", help="service account of the run's pods")
    login = parser.add_argument_group("credentials (multi-user Kubeflow; at most one)")
    for flag, env, what in (
        ("--token", TOKEN_ENV, "a bearer token"),
        ("--token-file", None, "a file holding a service-account token, re-read on every request"),
        ("--cookie", COOKIE_ENV, "a session cookie NAME=VALUE"),
    ):
        default = os.environ.get(env) or None if env else None
        login.add_argument(
            flag, default=default, help=what + (f" (default: ${env})" if env else "")
        )
    parser.add_argument(
        "--skip-version-check",
        action="store_true",
        help="submit to a server that does not tell its version",
    )


def run(args: argparse.Namespace) -> int:
    params = resolve_params(args.params, args.profile, args.param)
    image = getattr(args, "image", None)
    if image:
        os.environ["SHDH_IMAGE"] = image  # read by components.image when it is first imported
    pipelines = load_pipelines_package()
    image_module = sys.modules["components.image"]
    if image and image_module.IMAGE != image:
        raise RuntimeError(
            f"--image {image}: the components were already imported with "
            f"{image_module.IMAGE}; run in a fresh process"
        )
    if args.action == "run":
        result = pipelines.run_local(params, args.root)
        print(result.table)
        print(f"results in {result.results_dir}\nreport in {result.report}")
        return 0
    image_module.split_image(image_module.IMAGE)  # a malformed image fails here, by name
    settings = cluster_settings(args)
    log.info(
        "cluster settings from %s: train on %s",
        settings.source,
        f"{settings.accelerator_type} x{settings.accelerator_limit}" if settings.gpu else "the CPU",
    )
    if args.action == "compile":
        out = pipelines.compile_pipeline(params, args.out, settings=settings)
        print(f"pipeline written to {out}")
        return 0
    credentials = pipelines.Credentials(args.token, args.token_file, args.cookie)
    run_id = pipelines.submit(
        params,
        host=args.host,
        settings=settings,
        experiment=args.experiment,
        run_name=args.run_name,
        namespace=args.namespace,
        service_account=args.service_account,
        credentials=credentials,
        check_version=not args.skip_version_check,
    )
    print(f"run {run_id} submitted to {args.host} (experiment '{args.experiment}')")
    return 0


def cluster_settings(args: argparse.Namespace) -> Any:
    """--settings FILE, else the overlay named by --overlay (dev without one)."""
    pipelines = load_pipelines_package()
    if args.settings:
        return pipelines.settings_from_file(args.settings)
    return pipelines.settings_from_overlay(
        args.overlay or pipelines.DEFAULT_OVERLAY, project_root()
    )


def main(argv: Sequence[str] | None = None) -> int:
    return script_main(HELP, add_arguments, run, argv)


# --------------------------------------------------------------------------- component glue


def section_arg(text: str, name: str) -> dict[str, Any]:
    """A params.yaml section passed as a pipeline parameter (JSON; see pipeline_arguments),
    validated as `shdh` validates params.yaml before the component does any work."""
    try:
        value = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"pipeline parameter '{name}': not valid JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ConfigError(f"pipeline parameter '{name}': expected a JSON object, got {text!r}")
    settings.validate_section(name, value, f"pipeline parameter '{name}'")
    return value


NO_REPLICATE = -1  # a run's "replicate" without a `seeds` list: the master seed, unnamed


def planned_runs(train: dict[str, Any], baselines: dict[str, Any], kind: str) -> list[dict]:
    """The {method, bits, replicate} runs of one branch, as dvc.yaml's matrices: "deep" are
    train.methods x train.bits (x train.seeds), "shallow" baselines.methods x baselines.bits (x
    baselines.seeds); in the order `shdh evaluate` scores them (shdh.stages.evaluate's
    planned_runs, which also skips KMH where it cannot run). A pipeline parameter cannot be
    null, so a run without a seed of its own has replicate NO_REPLICATE."""
    from shdh.plan import planned_runs as all_runs

    none = {"methods": [], "bits": []}
    if kind == "deep":
        runs = all_runs({"train": train, "baselines": none})
    elif kind == "shallow":
        runs = all_runs({"train": none, "baselines": baselines})
    else:
        raise ValueError(f"plan: kind must be 'deep' or 'shallow', got '{kind}'")
    return [
        {"method": str(m), "bits": int(b), "replicate": NO_REPLICATE if s is None else int(s)}
        for m, b, s in runs
    ]


def replicate_arg(value: int) -> int | None:
    """A run's "replicate" as fitting.train takes it: NO_REPLICATE -> None."""
    return None if int(value) == NO_REPLICATE else int(value)


KUBEFLOW_SOURCE = "kubeflow-pipelines:shdh"  # the source name of Kubeflow's runs in the UI


def run_context(
    metadata: dict[str, Any], profile: str, pipeline_run_id: str,
    settings: dict[str, Any] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The MLflow tags and parent run of a Kubeflow run: the same tags as a DVC run's, with
    the dataset and raw-data hash that `download` put in the prepared artifact's metadata.
    The start step passes its `settings`: it creates the parent (they become its params) or
    reopens it; every later step only finds it."""
    from shdh import tracking

    missing = [k for k in ("dataset", "dvc_data_md5") if k not in metadata]
    if missing:
        raise ValueError(f"the prepared dataset artifact's metadata lacks {missing} (written by "
                         "the download component)")  # fmt: skip
    tags = {"dataset": str(metadata["dataset"]), "profile": profile,
            "dvc_data_md5": str(metadata["dvc_data_md5"]),
            **tracking.source_tags(KUBEFLOW_SOURCE, "JOB")}  # fmt: skip
    return tracking.pipeline_context(pipeline_run_id, tags, settings, reopen=settings is not None)


def pipeline_settings(seed: int, profile: str, sections: dict[str, str]) -> dict[str, Any]:
    """The pipeline's parameters as one settings dict, the layout of params.yaml."""
    return {"profile": profile, "seed": seed,
            **{name: section_arg(text, name) for name, text in sections.items()}}  # fmt: skip


def save_model(model_dir: str | Path, model: Any) -> None:
    """Copy a fitted model folder (fitting.train's METHOD-BITS) into a Model output artifact.

    The training work folder (the checkpoint, already logged to MLflow) stays behind.
    """
    from shdh.fitting import FIT_RECORD

    model_dir = Path(model_dir)
    record = json.loads((model_dir / FIT_RECORD).read_text())
    with atomic_dir(model.path) as tmp:
        shutil.copytree(model_dir, tmp, ignore=shutil.ignore_patterns("work"), dirs_exist_ok=True)
    model.metadata.update({"method": record["method"], "bits": int(record["bits"]),
                           "replicate": record.get("replicate")})  # fmt: skip


def gather_models(models: Iterable[Any], models_dir: str | Path) -> Path:
    """Lay Model artifacts out as evaluate expects (models_dir/METHOD/METHOD-BITS), by links."""
    from shdh.fitting import FIT_RECORD
    from shdh.plan import model_dir

    models_dir = Path(models_dir)
    for model in models:
        path = Path(model.path) / FIT_RECORD
        try:
            record = json.loads(path.read_text())
            replicate = record.get("replicate")
            link = model_dir(models_dir, record["method"], int(record["bits"]), replicate)
        except (OSError, ValueError, KeyError) as exc:
            raise ValueError(f"{path}: not a fitted model's record: {exc}") from exc
        if link.exists():
            raise ValueError(f"two model artifacts are both {link.name} ({model.path})")
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(Path(model.path).resolve(), target_is_directory=True)
    return models_dir


def kfp_metrics(scores: dict[str, Any], n: int) -> dict[str, float]:
    """The @n metrics of every method and code length, named METHOD_BITS_METRIC for the UI."""
    from shdh.tracking import metric_key

    return {
        f"{method}_{bits}_{metric_key(name)}": float(value)
        for method, by_bits in scores.items()
        for bits, row in by_bits.items()
        for name, value in row.items()
        if name.endswith(f"@{n}")
    }


if __name__ == "__main__":
    raise SystemExit(main())
