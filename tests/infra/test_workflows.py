"""The CI workflow that builds and pushes the images: GitHub's workflow schema accepts it (the
lint its own first job runs, offline here with check-jsonschema's bundled schema), and it builds
both Dockerfile targets under the names the code and the manifests use, pushing only for a
release tag."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from shdh.kfp.components.image import GPU_TAG_SUFFIX, REPOSITORY
from tests.infra.dockerfile import stages
from tests.infra.tools import find_tool

REPO = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((REPO / ".github" / "workflows").glob("*.yml"))
IMAGES = REPO / ".github" / "workflows" / "images.yml"


def check_schema(*paths: Path) -> subprocess.CompletedProcess[str]:
    tool = find_tool("check-jsonschema", "pip install check-jsonschema")
    command = [tool, "--builtin-schema", "vendor.github-workflows", *map(str, paths)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def workflow() -> dict:
    # PyYAML reads the key `on` as True (YAML 1.1); GitHub reads it as "on".
    spec = yaml.safe_load(IMAGES.read_text())
    spec["on"] = spec.pop(True)
    return spec


def steps_running(job: dict, word: str) -> list[str]:
    return [step["run"] for step in job["steps"] if word in step.get("run", "")]


def test_every_workflow_matches_githubs_schema():
    assert WORKFLOWS, "no workflow in .github/workflows"
    result = check_schema(*WORKFLOWS)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_schema_check_can_fail(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text("on: push\njobs:\n  build:\n    steps:\n      - run: echo\n")  # no runs-on
    assert check_schema(broken).returncode != 0


def test_builds_on_pull_requests_and_pushes_only_for_release_tags():
    spec = workflow()
    assert spec["on"]["push"] == {"tags": ["v*"]}
    assert "pull_request" in spec["on"]
    build = spec["jobs"]["build"]
    assert build["env"]["PUSH"] == "${{ startsWith(github.ref, 'refs/tags/v') }}"
    (action,) = [s for s in build["steps"] if s.get("uses", "").startswith("docker/build-push")]
    assert action["with"]["push"] == "${{ env.PUSH == 'true' }}"
    (login,) = [s for s in build["steps"] if s.get("uses", "").startswith("docker/login")]
    assert login["if"] == "env.PUSH == 'true'"
    assert build["permissions"]["packages"] == "write"
    assert workflow()["permissions"] == {"contents": "read"}


def test_both_targets_under_the_names_the_code_and_manifests_use():
    """ghcr.io/OWNER/shdh:VERSION and :VERSION-cuda, for the project's owner SHDH_IMAGE's
    default (components/image.py) and its GPU variant."""
    build = workflow()["jobs"]["build"]
    matrix = {item["target"]: item["suffix"] for item in build["strategy"]["matrix"]["include"]}
    assert matrix == {"runtime": "", "gpu": GPU_TAG_SUFFIX}
    assert set(matrix) <= set(stages(REPO / "Dockerfile"))
    (naming,) = steps_running(build, "GITHUB_OUTPUT")
    assert "image=ghcr.io/$owner/shdh:$version${{ matrix.suffix }}" in naming
    registry, owner, name = REPOSITORY.split("/")
    assert (registry, name) == ("ghcr.io", "shdh") and owner == owner.lower()
    assert "pyproject.toml" in naming and "v$version" in naming  # the tag must be the version


def test_the_lint_job_runs_what_these_tests_run():
    lint = workflow()["jobs"]["lint"]
    (install,) = steps_running(lint, "pip install")
    tools = re.search(r"\^\((.*)\)==", install)[1].split("|")
    lock = (REPO / "requirements.lock").read_text()
    for tool in tools:
        assert re.search(rf"^{re.escape(tool)}==", lock, re.M), f"{tool} is not in the lock"
    assert steps_running(lint, "hadolint --failure-threshold style Dockerfile")
    assert steps_running(lint, "check-jsonschema --builtin-schema vendor.github-workflows")
    assert "lint" in workflow()["jobs"]["build"]["needs"]


def test_images_are_built_and_pushed_only_after_the_tests_pass():
    jobs = workflow()["jobs"]
    assert set(jobs["build"]["needs"]) == {"lint", "test"}
    assert steps_running(jobs["test"], ".ci/run")
    (wheelhouse,) = steps_running(jobs["build"], "tools.images wheelhouse")
    steps = jobs["build"]["steps"]
    built = next(i for i, s in enumerate(steps) if s.get("uses", "").startswith("docker/build"))
    assert next(i for i, s in enumerate(steps) if s.get("run") == wheelhouse) < built


@pytest.mark.parametrize("word", ["shdh --version", "id -u", "docker image inspect"])
def test_each_built_image_is_smoke_tested_and_its_size_recorded(word):
    assert steps_running(workflow()["jobs"]["build"], word)


def test_one_name_for_the_image_setting_everywhere():
    """SHDH_IMAGE in the code, the docs, the workflows and the manifests; no other variable
    names the image (a bare $IMAGE, the old name of the docs, would silently do nothing)."""
    from shdh.kfp.components.image import IMAGE_ENV

    assert IMAGE_ENV == "SHDH_IMAGE"
    files = [
        REPO / "README.md",
        REPO / "Dockerfile",
        *(REPO / "docs").glob("*.md"),
        *WORKFLOWS,
        *(REPO / "k8s").rglob("*.yaml"),
    ]
    for path in files:
        text = path.read_text()
        assert not re.search(r"(?<![A-Z_])IMAGE\b(?!_)", text.replace("SHDH_IMAGE", "")), path
    assert "SHDH_IMAGE" in (REPO / "docs" / "cluster.md").read_text()
    assert "SHDH_IMAGE" in (REPO / "k8s" / "base" / "kustomization.yaml").read_text()
