"""Estimate the size of the two images of the Dockerfile without building them.

The machines this project is developed on reach no container registry, so the images cannot be
built here. What they will hold can be weighed all the same: the Python distributions each
image installs are the dependency closure of the `shdh` wheel with its `pipeline` extra (and
the `server` extra in the runtime image) at the versions of requirements.lock, which are the
versions installed in the project's virtual environment. Each distribution's installed size is
the sum of the sizes its RECORD lists. The runtime image takes PyTorch's CPU build instead of
the CUDA one: give a CPU wheel with --cpu-torch-wheel and its unpacked size and its own
requirements (no nvidia-*, no triton) are used. The base images and the Python of the GPU
image are added as the approximate sizes their publishers show (--base-mb), so the totals are
estimates: CI records the real size of every image it builds (.github/workflows/images.yml, the
job summary).

    python benchmarks/image_sizes.py --cpu-torch-wheel /opt/wheels/torch-2.13.0+cpu-...whl
"""

from __future__ import annotations

import argparse
import zipfile
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

# Unpacked sizes, in MB, of what each image starts from (approximate published figures).
BASES = {
    "runtime": ("python:3.11.14-slim-bookworm", 125.0),
    "gpu": ("nvidia/cuda:13.0.3-base-ubuntu24.04 + uv's CPython 3.11.14 + uv", 250.0 + 95.0 + 40.0),
}


def requirements(dist: metadata.Distribution, extras: set[str]) -> list[Requirement]:
    found = []
    for text in dist.requires or []:
        req = Requirement(text)
        if req.marker is None or any(req.marker.evaluate({"extra": e}) for e in extras or {""}):
            found.append(req)
    return found


def closure(root: str, extras: set[str], replaced: dict[str, list[Requirement]]) -> set[str]:
    """Every distribution `root[extras]` needs, by canonical name; `replaced` gives other
    requirements for some distributions (the CPU torch's own)."""
    seen: set[str] = set()
    todo = [(root, extras)]
    while todo:
        name, wanted = todo.pop()
        key = canonicalize_name(name)
        if key in seen:
            continue
        seen.add(key)
        reqs = replaced.get(key)
        if reqs is None:
            reqs = requirements(metadata.distribution(name), wanted)
        todo += [(r.name, set(r.extras)) for r in reqs]
    return seen


def installed_mb(name: str) -> float:
    dist = metadata.distribution(name)
    return sum(f.size or 0 for f in dist.files or []) / 1e6


def wheel_facts(path: Path) -> tuple[float, list[Requirement]]:
    """Unpacked size in MB and the requirements (for a plain install) of a wheel file."""
    with zipfile.ZipFile(path) as whl:
        size = sum(info.file_size for info in whl.infolist()) / 1e6
        meta = next(n for n in whl.namelist() if n.endswith(".dist-info/METADATA"))
        text = whl.read(meta).decode()
    reqs = [
        Requirement(line.split(":", 1)[1].strip())
        for line in text.splitlines()
        if line.startswith("Requires-Dist:")
    ]
    plain = [r for r in reqs if r.marker is None or r.marker.evaluate({"extra": ""})]
    return size, plain


def report(cpu_torch_wheel: Path | None) -> str:
    gpu = closure("shdh", {"pipeline"}, {})
    replaced, cpu_torch_mb = {}, None
    if cpu_torch_wheel is not None:
        cpu_torch_mb, reqs = wheel_facts(cpu_torch_wheel)
        replaced["torch"] = reqs
    runtime = closure("shdh", {"pipeline", "server"}, replaced)
    rows = []
    for image, names in (("runtime", runtime), ("gpu", gpu)):
        sizes = {n: installed_mb(n) for n in names if n != "shdh"}
        if image == "runtime" and cpu_torch_mb is not None:
            sizes["torch"] = cpu_torch_mb
        base, base_mb = BASES[image]
        top = sorted(sizes.items(), key=lambda kv: -kv[1])[:4]
        biggest = ", ".join(f"{n} {mb:,.0f}" for n, mb in top)
        packages = sum(sizes.values())
        rows.append(
            f"| {image} | {len(sizes)} | {packages:,.0f} | {biggest} | {base} ~{base_mb:,.0f}"
            f" | ~{(packages + base_mb) / 1000:.1f} GB |"
        )
    head = (
        "| image | Python distributions | their installed MB | largest (MB) | base (MB) | "
        "estimated total |\n|---|---|---|---|---|---|"
    )
    return "\n".join([head, *rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cpu-torch-wheel", type=Path, help="a torch +cpu wheel to weigh")
    args = parser.parse_args()
    print(report(args.cpu_torch_wheel))


if __name__ == "__main__":
    main()
