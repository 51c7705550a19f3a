"""Build the project's images here, with no registry: `make images` (docs/cluster.md, section 1).

    python -m tools.images engine            # Docker from Debian's packages, dockerd started
    python -m tools.images wheelhouse        # only the wheels (CI's image workflow)
    python -m tools.images build [--target runtime|gpu ...]

Nothing can be pulled on the machines this project is developed and tested on, so the one
Dockerfile takes its bases as build arguments (RUNTIME_BASE, GPU_BASE) whose defaults are the
public pinned bases that CI's published images use, and a local build names a base made here:
`debootstrap --variant=minbase` of Debian bookworm with Python 3.11, imported with `docker
import` under a tag that is a hash of what made it, so it is made once and reused. Python
packages come from a wheelhouse made on the host from requirements.lock (`pip download` of
the package's own dependencies at their locked versions, and the package's wheel), which the
build installs with `pip install --no-index`: no network inside the build.

Each image is labelled with a hash of everything its build reads (the Dockerfile, the build
context, the base's image id, the build arguments); an image whose label matches is reused
without sending the multi-gigabyte context to the daemon again.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOCAL_REPOSITORY = "localhost/shdh"  # REGISTRY/NAME: never pushed anywhere, never pulled
BASE_REPOSITORY = "localhost/shdh-base"
BUILD_KEY_LABEL = "io.github.shdh.build-key"
WHEELHOUSE = REPO / "artifacts" / "wheelhouse"  # ignored by git, allowed into the build context
SUITE = "bookworm"  # the Debian release of the public runtime base (python:3.11.14-slim-bookworm)
BASE_PACKAGES = ("python3", "python3-venv", "python3-pip", "ca-certificates")
APT_SOURCES = (Path("/etc/apt/sources.list.d/debian.sources"), Path("/etc/apt/sources.list"))
DOCKERD_ARGS = (
    "--storage-driver=overlay2",
    "--iptables=false",
    "--ip6tables=false",
    "--bridge=none",
)
DOCKERD_LOG = Path("/var/log/shdh-dockerd.log")
TARGETS = ("runtime", "gpu")


class EngineUnavailable(RuntimeError):
    """No Docker engine can be reached or started here; the message says why."""


# --------------------------------------------------------------------------- the engine


def docker_answers(timeout: float = 20) -> bool:
    try:
        done = subprocess.run(
            ["docker", "info", "--format", "{{.ServerVersion}}"],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and bool(done.stdout.strip())


def ensure_engine(wait_s: float = 60) -> str:
    """A Docker daemon that answers: Debian's docker.io installed with apt where it is missing
    (as root), dockerd started in the background where none runs. Returns the server version;
    raises EngineUnavailable naming the reason."""
    if docker_answers():
        return _server_version()
    if shutil.which("dockerd") is None:
        _apt_install("docker.io")
    if shutil.which("docker") is None or shutil.which("dockerd") is None:
        raise EngineUnavailable("no docker/dockerd on PATH and apt could not install docker.io")
    if os.geteuid() != 0:
        raise EngineUnavailable("dockerd is not running and only root can start it here")
    DOCKERD_LOG.parent.mkdir(parents=True, exist_ok=True)
    with open(DOCKERD_LOG, "ab") as log:
        subprocess.Popen(
            ["dockerd", *DOCKERD_ARGS],
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,  # outlives this process: later builds and tests reuse it
        )
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        if docker_answers(timeout=5):
            return _server_version()
        time.sleep(1)
    tail = DOCKERD_LOG.read_text(errors="replace")[-2000:] if DOCKERD_LOG.exists() else ""
    raise EngineUnavailable(f"dockerd did not answer within {wait_s:.0f} s; its log ends:\n{tail}")


def _server_version() -> str:
    out = subprocess.run(
        ["docker", "version", "--format", "{{.Server.Version}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    return out.stdout.strip()


def _apt_install(*packages: str) -> None:
    """apt-get install, with an update first only if the plain install fails (as the Makefile
    installs dataset-fashion-mnist); silent when apt is missing or this is not root."""
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        return
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    apt = ["apt-get", "-o", "DPkg::Lock::Timeout=600"]  # `make test` may be installing beside
    install = [*apt, "install", "-y", "-q", "--no-install-recommends", *packages]
    if subprocess.run(install, env=env, capture_output=True).returncode == 0:
        return
    subprocess.run([*apt, "update", "-q"], env=env, capture_output=True)
    subprocess.run(install, env=env, capture_output=True)


# --------------------------------------------------------------------------- the base


def apt_mirror(sources: tuple[Path, ...] = APT_SOURCES) -> str:
    """The Debian mirror apt itself uses (the first URIs: of a deb822 file, or the first `deb`
    line): the base is made from where this machine's packages come from, never a fixed host."""
    for path in sources:
        try:
            text = path.read_text()
        except OSError:
            continue
        for line in text.splitlines():
            words = line.split()
            if len(words) >= 2 and words[0] == "URIs:" and "security" not in words[1]:
                return words[1]
            if len(words) >= 3 and words[0] == "deb" and "security" not in line:
                return next(w for w in words[1:] if "://" in w)
    raise EngineUnavailable(f"no Debian mirror in apt's sources ({', '.join(map(str, sources))})")


def base_tag(mirror: str) -> str:
    recipe = json.dumps(
        {"suite": SUITE, "variant": "minbase", "packages": BASE_PACKAGES, "mirror": mirror}
    )
    return f"{BASE_REPOSITORY}:{SUITE}-{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"


def image_id(name: str) -> str | None:
    done = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Id}}", name],
        capture_output=True,
        text=True,
    )
    return done.stdout.strip() if done.returncode == 0 else None


def ensure_base(log=print) -> str:
    """The local base image (Debian bookworm minbase with Python 3.11), made with debootstrap
    unless an image of the same recipe exists. Returns its tag."""
    mirror = apt_mirror()
    tag = base_tag(mirror)
    if image_id(tag):
        log(f"base {tag}: reused")
        return tag
    if shutil.which("debootstrap") is None:
        _apt_install("debootstrap")
    if shutil.which("debootstrap") is None:
        raise EngineUnavailable("debootstrap is missing and apt could not install it")
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="shdh-base-", dir="/var/tmp") as work:
        root = Path(work) / "root"
        subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                "--include=" + ",".join(BASE_PACKAGES),
                SUITE,
                str(root),
                mirror,
            ],
            check=True,
            capture_output=True,
        )
        # apt's lists and caches are the bulk of what debootstrap leaves behind
        for leftover in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for path in (root / leftover).glob("*"):
                if path.is_file():
                    path.unlink()
        tar = subprocess.Popen(["tar", "-C", str(root), "-c", "."], stdout=subprocess.PIPE)
        subprocess.run(
            ["docker", "import", "--change", 'CMD ["/bin/bash"]', "-", tag],
            stdin=tar.stdout,
            check=True,
            capture_output=True,
        )
        if tar.wait() != 0:
            raise RuntimeError(f"tar of {root} failed")
    log(f"base {tag}: made with debootstrap from {mirror} in {time.monotonic() - start:.0f} s")
    return tag


# --------------------------------------------------------------------------- the wheelhouse


def lock_pins(lock: Path = REPO / "requirements.lock") -> dict[str, str]:
    pins = {}
    for line in lock.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if "==" in line:
            name, version = line.split("==", 1)
            pins[re.sub(r"[-_.]+", "-", name.strip()).lower()] = version.strip()
    return pins


def closure(extras: tuple[str, ...] = ("pipeline", "server")) -> set[str]:
    """The distributions `pip install shdh[EXTRAS]` installs, read from this environment's
    metadata (the venv of requirements.lock): names as the lock writes them, lower case."""
    from importlib import metadata

    from packaging.requirements import Requirement

    seen: set[str] = set()
    todo = [("shdh", set(extras))]
    while todo:
        name, wanted = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        seen.add(key)
        for text in metadata.distribution(name).requires or []:
            req = Requirement(text)
            env = [{"extra": extra} for extra in wanted | {""}]
            if req.marker is None or any(req.marker.evaluate(e) for e in env):
                todo.append((req.name, set(req.extras)))
    return seen - {"shdh"}


def top_level(extras: tuple[str, ...] = ("pipeline", "server")) -> list[str]:
    """What `shdh[EXTRAS]` asks for, markers of the extras dropped: what the images install
    before the package itself, so that a change of the sources leaves that layer cached."""
    from importlib import metadata

    from packaging.requirements import Requirement

    wanted = []
    for text in metadata.distribution("shdh").requires or []:
        req = Requirement(text)
        envs = [{"extra": extra} for extra in (*extras, "")]
        if req.marker is None or any(req.marker.evaluate(env) for env in envs):
            req.marker = None
            wanted.append(str(req))
    return sorted(wanted)


def ensure_wheelhouse(python: str = sys.executable, log=print) -> Path:
    """WHEELHOUSE, in two parts that change at different paces:

    deps/  a wheel of every distribution `pip install shdh[pipeline,server]` installs, at its
           version in requirements.lock, from the host's package index (`pip wheel --no-deps`:
           no resolution, and sdists such as kfp's built here), and their list; remade only
           when requirements.lock or pyproject.toml change. deps/cpu/ holds PyTorch's CPU
           build of the same release where CPU_TORCH_INDEX names an index that has it (CI).
    shdh/  the package's own wheel, remade whenever its sources change (seconds).
    """
    from importlib import metadata

    deps, package = WHEELHOUSE / "deps", WHEELHOUSE / "shdh"
    index = os.environ.get("CPU_TORCH_INDEX", "")
    key = _hash_files([REPO / "requirements.lock", REPO / "pyproject.toml"]) + index
    pip = [python, "-m", "pip", "--disable-pip-version-check", "-q", "wheel", "--no-deps"]
    if _stamped(deps, key):
        log(f"wheelhouse {deps.relative_to(REPO)}: reused")
    else:
        start = time.monotonic()
        # The lock's version; for what pip freeze leaves out of it (setuptools, which torch
        # needs), the version this environment, installed from the lock, has.
        pins = {name: metadata.version(name) for name in closure()} | lock_pins()
        tmp = _fresh(deps)
        (tmp / "cpu").mkdir()
        wanted = tmp / "requirements.txt"
        wanted.write_text("".join(f"{name}=={pins[name]}\n" for name in sorted(closure())))
        subprocess.run([*pip, "-w", str(tmp), "-r", str(wanted)], check=True)
        (tmp / "top-level.txt").write_text("".join(f"{r}\n" for r in top_level()))
        if index:  # PyTorch's CPU builds of the locked release, for the runtime image only
            cpu = [f"{n}=={pins[n]}+cpu" for n in ("torch", "torchvision")]
            subprocess.run([*pip, "--index-url", index, "-w", str(tmp / "cpu"), *cpu], check=True)
        _publish(tmp, deps, key)
        wheels = list(deps.rglob("*.whl"))
        size = sum(p.stat().st_size for p in wheels)
        seconds = time.monotonic() - start
        log(f"wheelhouse: {len(wheels)} wheels, {size / 1e9:.2f} GB in {seconds:.0f} s")
    sources = [REPO / name for name in PACKAGE_SOURCES]
    source_key = _hash_files([f for s in sources for f in ([s] if s.is_file() else _files(s))])
    if not _stamped(package, source_key):
        tmp = _fresh(package)
        build_wheel(tmp, python)
        _publish(tmp, package, source_key)
    return WHEELHOUSE


# What the package's wheel is built from: its metadata, its sources and the folders pyproject.toml
# maps into it (the Kubeflow DAG, its components and the cluster's manifests: shdh.kfp).
PACKAGE_SOURCES = ("pyproject.toml", "README.md", "src", "components", "pipelines", "k8s")


def build_wheel(out: Path, python: str = sys.executable) -> Path:
    """The package's wheel, built into `out` from a copy of PACKAGE_SOURCES: setuptools leaves
    build/ and *.egg-info in the folder it builds, which must not be the checkout."""
    pip = [python, "-m", "pip", "--disable-pip-version-check", "-q", "wheel", "--no-deps"]
    with tempfile.TemporaryDirectory(prefix="shdh-wheel-") as work:
        ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "*.pyc")
        for name in PACKAGE_SOURCES:
            source = REPO / name
            if source.is_dir():
                shutil.copytree(source, Path(work) / name, ignore=ignore)
            else:
                shutil.copy2(source, work)
        subprocess.run([*pip, "--no-build-isolation", "-w", str(out), work], check=True)
    (wheel,) = Path(out).glob("shdh-*.whl")
    return wheel


def _stamps() -> list[str]:
    return [(WHEELHOUSE / part / ".key").read_text() for part in ("deps", "shdh")]


def _stamped(folder: Path, key: str) -> bool:
    stamp = folder / ".key"
    return stamp.is_file() and stamp.read_text() == key


def _fresh(folder: Path) -> Path:
    tmp = folder.with_name(folder.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def _publish(tmp: Path, folder: Path, key: str) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    tmp.rename(folder)
    (folder / ".key").write_text(key)


def _files(folder: Path) -> list[Path]:
    return sorted(
        p
        for p in folder.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and ".egg-info" not in str(p)
    )


def _hash_files(paths: list[Path]) -> str:
    digest = hashlib.sha256()
    for path in paths:
        digest.update(str(path.relative_to(REPO)).encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()


# --------------------------------------------------------------------------- the images


@dataclass(frozen=True)
class Built:
    target: str
    image: str
    reused: bool
    seconds: float
    size_bytes: int


def local_image(target: str) -> str:
    from shdh import __version__

    return f"{LOCAL_REPOSITORY}:{__version__}" + ("-cuda" if target == "gpu" else "")


def build_image(target: str, base: str, log=print) -> Built:
    """docker build --target TARGET on the local base; reused when its build key is unchanged."""
    from shdh import __version__

    image = local_image(target)
    commit = _git_commit()
    args = {
        "RUNTIME_BASE": base,
        "GPU_BASE": base,
        "SHDH_VERSION": __version__,
        "VCS_REF": commit,
        "WHEELHOUSE": str(WHEELHOUSE.relative_to(REPO)),
    }
    context = [REPO / "Dockerfile", REPO / ".dockerignore", REPO / "requirements.lock"]
    context += [REPO / "pyproject.toml", REPO / "README.md", *_files(REPO / "src")]
    key_parts = [_hash_files(context), image_id(base) or "", *_stamps()]
    key = hashlib.sha256(json.dumps([target, args, key_parts]).encode()).hexdigest()
    if _label(image, BUILD_KEY_LABEL) == key:
        log(f"{image}: reused")
        return Built(target, image, True, 0.0, _size(image))
    start = time.monotonic()
    command = ["docker", "build", "--target", target, "--tag", image]
    command += ["--label", f"{BUILD_KEY_LABEL}={key}"]
    for name, value in args.items():
        command += ["--build-arg", f"{name}={value}"]
    subprocess.run([*command, str(REPO)], check=True)
    seconds = time.monotonic() - start
    built = Built(target, image, False, seconds, _size(image))
    log(f"{image}: built in {seconds:.0f} s, {built.size_bytes / 1e9:.2f} GB")
    return built


def _label(image: str, label: str) -> str | None:
    done = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{json .Config.Labels}}", image],
        capture_output=True,
        text=True,
    )
    if done.returncode != 0:
        return None
    return (json.loads(done.stdout) or {}).get(label)


def _size(image: str) -> int:
    done = subprocess.run(
        ["docker", "image", "inspect", "--format", "{{.Size}}", image],
        capture_output=True,
        text=True,
        check=True,
    )
    return int(done.stdout)


def _git_commit() -> str:
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    return done.stdout.strip() if done.returncode == 0 else "unknown"


def build(targets: tuple[str, ...] = TARGETS, log=print) -> list[Built]:
    """Everything `make images` does: the engine, the base, the wheelhouse, the images."""
    ensure_engine()
    base = ensure_base(log)
    ensure_wheelhouse(log=log)
    return [build_image(target, base, log) for target in targets]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.images", description=__doc__)
    actions = parser.add_subparsers(dest="action", required=True)
    actions.add_parser("engine", help="install and start Docker where needed")
    actions.add_parser("wheelhouse", help="the wheels of requirements.lock the images install")
    build_p = actions.add_parser("build", help="build the images (reused when unchanged)")
    build_p.add_argument("--target", action="append", choices=TARGETS, help="(default: both)")
    args = parser.parse_args(argv)
    try:
        if args.action == "engine":
            print(f"Docker {ensure_engine()}")
            return 0
        if args.action == "wheelhouse":
            ensure_wheelhouse()
            return 0
        for built in build(tuple(args.target or TARGETS)):
            print(f"{built.image}\t{built.size_bytes}\t{built.seconds:.0f}")
    except EngineUnavailable as exc:
        print(f"no Docker engine: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
