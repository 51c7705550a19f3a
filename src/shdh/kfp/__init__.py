"""Kubeflow Pipelines: the DAG (shdh.kfp.pipelines), its components (shdh.kfp.components) and
the cluster's manifests (`manifests()`), installed with the package so that `shdh pipeline
compile|run|submit` works wherever shdh is installed, not only in a clone.

In the repository they are its top-level folders pipelines/, components/ and k8s/, which the
package maps under its own name (pyproject.toml's package-dir): a wheel puts no name as generic as
`components` or `pipelines` at the top of a user's site-packages. pipelines/ and components/ have
rules of their own (tests/unit/test_layers.py).

May import: nothing of shdh.
"""

from __future__ import annotations

from pathlib import Path

MANIFESTS = "k8s"  # the folder of the cluster's kustomize base, components and overlays


def manifests() -> Path:
    """The cluster's manifests: beside this module in an installed wheel, the repository's k8s/
    in a checkout (an editable install, where this file is src/shdh/kfp/__init__.py)."""
    here = Path(__file__).resolve().parent
    for candidate in (here / MANIFESTS, here.parents[2] / MANIFESTS):
        if (candidate / "overlays").is_dir():
            return candidate
    raise FileNotFoundError(
        f"no cluster manifests at {here / MANIFESTS} or {here.parents[2] / MANIFESTS}"
    )
