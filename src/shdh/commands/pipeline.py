"""shdh pipeline: the Kubeflow front door: compile the DAG, run it locally, submit it to a cluster.

    shdh pipeline compile [--overlay NAME] [--profile P] [--set KEY=VALUE ...] [--out FILE]
    shdh pipeline run --local [--docker] [--profile smoke]
    shdh pipeline submit --host URL [--overlay NAME] [--namespace NS] [--token-file FILE] ...
    shdh pipeline retry RUN_ID --host URL [--token-file FILE] ...

The DAG, its components and the cluster's manifests are part of the installed package
(shdh.kfp, mapped from the repository's pipelines/, components/ and k8s/), so the command works
wherever shdh is installed. Settings come from params.yaml and profiles/ through
shdh.settings.profiles, as for DVC, so a profile name selects the same values in both front
doors.

The settings and the glue the components call inside their containers are in shdh.kubeflow.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from shdh.commands.common import script_main
from shdh.kubeflow import resolve_params

HELP = "Kubeflow Pipelines: compile the DAG, run it locally (kfp.local) or submit it to a cluster"
log = logging.getLogger(__name__)

DEFAULT_OUT = "artifacts/pipeline.yaml"  # a build product, like the other artifacts
DEFAULT_LOCAL_ROOT = "artifacts/kfp-local"
DEFAULT_EXPERIMENT = "shdh"
# Where submit finds credentials that should stay off the command line (shell history, ps).
TOKEN_ENV = "SHDH_KFP_TOKEN"
COOKIE_ENV = "SHDH_KFP_COOKIE"


# --------------------------------------------------------------------------- the command


def add_arguments(parser: argparse.ArgumentParser) -> None:
    actions = parser.add_subparsers(dest="action", required=True, metavar="ACTION")
    compile_p = actions.add_parser("compile", help="write the pipeline YAML for a cluster")
    run_p = actions.add_parser("run", help="run the whole DAG here with kfp.local")
    submit_p = actions.add_parser("submit", help="upload the pipeline and start a run (kfp.Client)")
    for p in (compile_p, run_p, submit_p):
        p.add_argument("--params", default="params.yaml", help="settings file (params.yaml)")
        p.add_argument("--profile", help="apply profiles/NAME.yaml on top (smoke, default, ...)")
        p.add_argument(
            "--set",
            action="append",
            default=[],
            metavar="KEY=VALUE",
            help="override one setting by its params.yaml key, e.g. train.epochs=2 or "
            "train.methods=[shdh, dpsh] (repeatable; shdh.plan.overrides)",
        )
    for p in (compile_p, submit_p):
        add_cluster_arguments(p)
    compile_p.add_argument("--out", default=DEFAULT_OUT, help=f"output file ({DEFAULT_OUT})")
    run_p.add_argument(
        "--local",
        action="store_true",
        required=True,
        help="run with kfp.local's SubprocessRunner, in this environment",
    )
    run_p.add_argument(
        "--docker",
        action="store_true",
        help="run each task in a container of the image (kfp.local's DockerRunner, as UID "
        "10001 on a read-only root; `make images` builds it): set --image or SHDH_IMAGE",
    )
    run_p.add_argument("--image", help="with --docker: the image (default: $SHDH_IMAGE)")
    run_p.add_argument("--root", default=DEFAULT_LOCAL_ROOT, help="where the artifacts go")
    add_submit_arguments(submit_p)
    retry_p = actions.add_parser(
        "retry",
        help="retry a failed run in place: finished tasks are kept, an interrupted fit resumes "
        "from its checkpoint (what an evicted or deleted train pod needs)",
    )
    retry_p.add_argument("run_id", metavar="RUN_ID", help="the Kubeflow run id")
    retry_p.add_argument("--host", required=True, help="Kubeflow Pipelines API URL")
    add_login_arguments(retry_p)


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
    add_login_arguments(parser)


def add_login_arguments(parser: argparse.ArgumentParser) -> None:
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
    if args.action == "retry":
        from shdh.kfp import pipelines

        credentials = pipelines.Credentials(args.token, args.token_file, args.cookie)
        state = pipelines.retry(
            args.run_id,
            host=args.host,
            credentials=credentials,
            check_version=not args.skip_version_check,
        )
        print(f"run {args.run_id} ({state}) retried at {args.host}")
        return 0
    params = resolve_params(args.params, args.profile, args.set)
    image = getattr(args, "image", None)
    if image:
        os.environ["SHDH_IMAGE"] = image  # read when shdh.kfp.components.image is first imported
    from shdh.kfp import pipelines

    image_module = sys.modules["shdh.kfp.components.image"]
    if image and image_module.IMAGE != image:
        raise RuntimeError(
            f"--image {image}: the components were already imported with "
            f"{image_module.IMAGE}; run in a fresh process"
        )
    if args.action == "run":
        result = pipelines.run_local(params, args.root, docker=args.docker)
        print(result.table)
        print(f"results in {result.results_dir}\nreport in {result.report}")
        return 0
    # a malformed image fails here, named as it was given
    image_module.split_image(image_module.IMAGE, "--image" if image else image_module.IMAGE_ENV)
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
    from shdh.kfp import pipelines

    if args.settings:
        return pipelines.settings_from_file(args.settings)
    from shdh.kfp import manifests

    return pipelines.settings_from_overlay(args.overlay or pipelines.DEFAULT_OVERLAY, manifests())


def main(argv: Sequence[str] | None = None) -> int:
    return script_main(HELP, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
