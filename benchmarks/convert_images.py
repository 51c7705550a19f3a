"""Converting an image folder: wall time and peak memory of shdh.data.folder.folder_dataset.

Issue target: 60,000 32x32 images from a folder tree convert in under 2 minutes on 2 cores, with
peak memory under 2x the final array (60,000 x 32 x 32 x 3 uint8 = 184 MB, so 369 MB).

    python benchmarks/convert_images.py [--n 60000] [--workers 0 2] [--keep DIR]

Writes n class-dependent 32x32 PNGs into a folder tree (leaves at depths 2 and 3), then converts
it once per --workers value, each in a fresh Python process so that its peak RSS (VmHWM; it
includes the pages of the memory-mapped images.npy) is its own. The
decoding processes' peak is reported separately, and CPU seconds beside the wall time show how
much of the machine a run got (the development machine is shared). The PNGs were just
written, so they are read from the page cache: a cold disk adds its read time. Not a test: the
numbers depend on the machine; record them in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

LEAVES = (
    "animal/bird",
    "animal/fish",
    "animal/mammal/cat",
    "animal/mammal/dog",
    "animal/mammal/horse",
    "plant/flower/rose",
    "plant/flower/tulip",
    "plant/tree",
    "vehicle/car/sedan",
    "vehicle/car/truck",
)


def generate(root: Path, n: int, seed: int = 0) -> float:
    """n 32x32 RGB PNGs spread evenly over LEAVES; returns the seconds it took."""
    from PIL import Image

    start = time.perf_counter()
    rng = np.random.default_rng(seed)
    for j, leaf in enumerate(LEAVES):
        folder = root.joinpath(*leaf.split("/"))
        folder.mkdir(parents=True)
        count = n // len(LEAVES) + (j < n % len(LEAVES))
        images = rng.integers(0, 120, size=(count, 32, 32, 3), dtype=np.uint8)
        images[:, 4 + 2 * j : 10 + 2 * j, 4:28, j % 3] = 250  # a class-dependent bar
        for i, image in enumerate(images):
            Image.fromarray(image).save(folder / f"{i:05d}.png")
    return time.perf_counter() - start


def peak_rss() -> int:
    """This process's peak resident memory in bytes.

    Linux's VmHWM starts afresh with the program; ru_maxrss would also count the peak of the
    parent that forked it (here the generator), so it is only the fallback elsewhere.
    """
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def convert(root: Path, out: Path, workers: int) -> None:
    """Child mode: convert once and print the measurements as JSON."""
    from shdh.data.folder import folder_dataset

    baseline = peak_rss()
    start = time.perf_counter()
    path, tree = folder_dataset(root, out, workers=workers)
    seconds = time.perf_counter() - start
    images = np.load(path / "images.npy", mmap_mode="r")
    own = resource.getrusage(resource.RUSAGE_SELF)
    decoders = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(
        json.dumps(
            {
                "seconds": seconds,
                "cpu_seconds": own.ru_utime + own.ru_stime,
                "cpu_seconds_decoders": decoders.ru_utime + decoders.ru_stime,
                "n_items": len(images),
                "array_bytes": int(images.nbytes),
                "baseline_rss": baseline,
                "peak_rss": peak_rss(),
                "peak_rss_decoders": decoders.ru_maxrss * 1024,
                "tree_height": tree.height,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=60_000, help="number of images (60000)")
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 2])
    parser.add_argument("--keep", type=Path, help="generate into / reuse this folder")
    parser.add_argument(
        "--convert", nargs=3, metavar=("ROOT", "OUT", "WORKERS"), help=argparse.SUPPRESS
    )
    args = parser.parse_args()
    if args.convert:
        root, out, workers = args.convert
        convert(Path(root), Path(out), int(workers))
        return

    workdir = Path(tempfile.mkdtemp(prefix="shdh-convert-bench-"))
    root = args.keep or workdir / "images"
    try:
        if not root.exists():
            print(f"generating {args.n} PNGs in {root} ...", flush=True)
            print(f"  {generate(root, args.n):.1f} s")
        mb = 1e6
        print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()}")
        for workers in args.workers:
            out = workdir / f"dataset-w{workers}"
            cmd = [sys.executable, __file__, "--convert", str(root), str(out), str(workers)]
            result = subprocess.run(cmd, check=True, capture_output=True, text=True)
            m = json.loads(result.stdout.strip().splitlines()[-1])
            ratio = m["peak_rss"] / m["array_bytes"]
            print(
                f"workers={workers}: {m['n_items']} images in {m['seconds']:.1f} s "
                f"({m['n_items'] / m['seconds']:.0f} img/s; CPU {m['cpu_seconds']:.1f} s + "
                f"{m['cpu_seconds_decoders']:.1f} s in decoders); "
                f"array {m['array_bytes'] / mb:.0f} MB, "
                f"peak RSS {m['peak_rss'] / mb:.0f} MB ({ratio:.2f}x the array; "
                f"{m['baseline_rss'] / mb:.0f} MB before converting); decoder processes "
                f"{m['peak_rss_decoders'] / mb:.0f} MB each at most (ru_maxrss: an upper bound)"
            )
            shutil.rmtree(out)
        print(f"load after: {os.getloadavg()}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
