"""The installed distribution is complete: the wheel holds the Kubeflow DAG, its components and the
cluster's manifests under the package's own name (shdh.kfp), nothing generic at the top of
site-packages, and `shdh pipeline compile` works from it in a folder that is no checkout.

The venv takes the project's dependencies from the project's venv (its site-packages on the
path, whose own .pth files, the checkout's editable install among them, are not run), so that
nothing is downloaded; only shdh itself comes from the wheel."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest
import yaml
from tools.images import build_wheel

from tests.conftest import REPO


def test_the_package_list_names_every_package_of_the_sources():
    """pyproject.toml lists the packages (a mapped folder cannot be found): every folder of
    src/shdh with an __init__.py, and the three mapped ones."""
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    found = {
        ".".join(path.parent.relative_to(REPO / "src").parts)
        for path in (REPO / "src" / "shdh").rglob("__init__.py")
    }
    mapped = {"shdh.kfp.components", "shdh.kfp.pipelines", "shdh.kfp.k8s"}
    assert set(config["packages"]) == found | mapped
    assert {config["package-dir"][name] for name in mapped} == {"components", "pipelines", "k8s"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("dist"))


def test_the_wheel_holds_the_dag_the_components_and_the_manifests_under_shdh(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    tops = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert tops == {"shdh"}
    for part in (
        "shdh/kfp/components/train.py",
        "shdh/kfp/pipelines/shdh_pipeline.py",
        "shdh/kfp/k8s/overlays/dev/kustomization.yaml",
        "shdh/kfp/k8s/base/kustomization.yaml",
    ):
        assert part in names, part


@pytest.mark.slow
def test_a_pipeline_compiles_from_the_installed_wheel_outside_a_checkout(wheel, tmp_path):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    site = Path(
        subprocess.run(
            [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    # the project's dependencies, as a path: its .pth files (the editable shdh) do not run
    (site / "project-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index",
         "--target", str(site), str(wheel)],
        check=True,
    )  # fmt: skip
    work = tmp_path / "elsewhere"
    work.mkdir()
    (work / "params.yaml").write_text((REPO / "params.yaml").read_text())
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    code = (
        "import sys, shdh, shdh.kfp.pipelines, shdh.kfp.components.train as t\n"
        "print(shdh.__file__, t.__file__)\n"
        "from shdh.cli import main\n"
        "sys.exit(main(sys.argv[1:]))\n"
    )
    args = ["pipeline", "compile", "--set", "data.download_fallback=true", "--out", "p.yaml"]
    done = subprocess.run(
        [python, "-c", code, *args], cwd=work, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    shdh_file, component_file = done.stdout.split()[:2]
    assert shdh_file.startswith(str(site)) and component_file.startswith(str(site))
    spec = next(yaml.safe_load_all((work / "p.yaml").read_text()))
    assert spec["pipelineInfo"]["name"] == "shdh"
    tasks = {t["taskInfo"]["name"] for t in spec["root"]["dag"]["tasks"].values()}
    assert {"prepare", "tree", "smatrix"} <= tasks
    assert "download" in done.stderr  # no data.dvc here: the run downloads, and says so
