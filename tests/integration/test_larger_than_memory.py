"""Data larger than memory: a folder of photos whose prepared images are four times the memory a
process may use is prepared into shards and trained on for one epoch, with loader workers,
under that limit; the same job holding the images in memory fails under it.

The limit is RLIMIT_DATA, which caps a process's private writable memory (heap, anonymous
mappings, thread stacks) but not the page cache of memory-mapped files, so it measures what
the job itself holds, not what the kernel caches of the shards. It is set at the process's
data size once it has imported everything and trained once on a few tiny images (the fixed
cost of the interpreter, torch, shdh and the thread pools) plus BUDGET_MB; the DataLoader
workers inherit it. glibc is told to map large blocks on their own
(MALLOC_MMAP_THRESHOLD_), so that freed batches leave the process instead of staying in its
heap, counted against the limit.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.slow

SIDE = 128  # photos are prepared as SIDE x SIDE RGB: 48 KiB each
BUDGET_MB = 80
N_PHOTOS = math.ceil(4 * BUDGET_MB * 2**20 / (SIDE * SIDE * 3))  # 6,827: 320 MiB prepared
SHARD_MB = 8
LOADER_WORKERS = 2
LEAVES = ("animal/bird", "animal/cat", "vehicle/boat", "vehicle/car")
ENV = {"MALLOC_MMAP_THRESHOLD_": str(128 * 1024), "OMP_NUM_THREADS": "2"}


def write_photos(root: Path, n: int) -> None:
    """n JPEG photos (noise tinted by the top-level class, a bright square by the leaf), at
    1.5 x SIDE so that preparing them resizes as it would a camera's photos. Each photo's noise
    is a window of one field at a seeded offset: drawing fresh noise for every photo took most
    of the time of writing them, and the test needs photos that differ, not independent ones."""
    from PIL import Image

    rng = np.random.default_rng(0)
    side = SIDE * 3 // 2
    field = rng.integers(0, 120, (2 * side, 2 * side, 3), dtype=np.uint8)
    offsets = rng.integers(0, side, (n, 2))
    for i, (row, col) in enumerate(offsets):
        leaf = LEAVES[i % len(LEAVES)]
        folder = root / leaf
        folder.mkdir(parents=True, exist_ok=True)
        img = field[row : row + side, col : col + side].copy()
        img[..., 0 if leaf.startswith("animal") else 2] += 100
        corner = (i % len(LEAVES)) * side // 5
        img[corner : corner + side // 4, corner : corner + side // 4] = 255
        Image.fromarray(img).save(folder / f"{i:05d}.jpg", quality=85)


def _data_size() -> int:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmData:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmData in /proc/self/status")


def _warm_up(work: Path) -> None:
    """One tiny fit: the imports, thread pools and kernels a fit loads once."""
    from shdh.hashers.shdh import shdh_objective
    from shdh.training.loop import train
    from shdh.training.loop_settings import TrainConfig

    images = np.random.default_rng(0).integers(0, 256, (8, 8, 8, 3), dtype=np.uint8)
    anc = np.array([[0, 1 + i % 2, 3 + i % 4] for i in range(8)])
    config = TrainConfig(n_bits=16, width=0.125, batch_size=4, epochs=1, device="cpu")
    layout = {"segment_sizes": [8, 8], "segment_levels": [2, 3], "layer_weights": [0, 2 / 3, 1 / 3]}
    loss = shdh_objective(*layout.values())
    train(config, images, anc, np.arange(8), work, objective=loss, **layout)


def job(root: str) -> None:
    """The subprocess: limit its memory, prepare and train, then try to load the prepared images
    into memory (under the same limit, in the same process: one start-up of torch, not two); one
    JSON line on stdout says how it went."""
    import resource

    import torch

    from shdh.data.dataset import load_dataset
    from shdh.data.folder import folder_dataset
    from shdh.hashers.shdh import shdh_objective
    from shdh.training.loop import train
    from shdh.training.loop_settings import TrainConfig

    root_dir = Path(root)
    torch.set_num_threads(2)
    _warm_up(root_dir / "warm")
    base = _data_size()
    limit = base + BUDGET_MB * 2**20
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))
    report = {"budget_bytes": BUDGET_MB * 2**20, "base_bytes": base}
    t0 = time.perf_counter()
    out, tree = folder_dataset(
        root_dir / "photos", root_dir / "prepared", image_size=SIDE, workers=0, shard_mb=SHARD_MB
    )
    ds = load_dataset(out)
    report["prepare_s"] = time.perf_counter() - t0
    anc = tree.ancestors_of_labels(list(ds.labels))
    u = [float(w) for w in tree.layer_weights()]
    sizes, levels = [8] * (anc.shape[1] - 1), list(range(2, anc.shape[1] + 1))
    config = TrainConfig(
        n_bits=sum(sizes),
        width=0.125,
        image_size=32,
        batch_size=64,
        epochs=1,
        device="cpu",
        num_threads=2,
        loader_workers=LOADER_WORKERS,
    )
    t0 = time.perf_counter()
    result = train(
        config,
        ds.images,
        anc,
        np.arange(len(ds.images)),
        root_dir / "run",
        segment_sizes=sizes,
        segment_levels=levels,
        layer_weights=u,
        objective=shdh_objective(sizes, levels, u),
    )
    report |= {
        "train_s": time.perf_counter() - t0,
        "images_type": type(ds.images).__name__,
        "n_items": len(ds.images),
        "data_bytes": int(np.prod(ds.images.shape)),
        "n_shards": len(list((out / "images").iterdir())),
        "history": result.history,
        "data_size_after": _data_size() - base,
        "max_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
    }
    try:
        load_dataset(out, mmap=False)
        report["whole"] = "loaded"
    except MemoryError as exc:
        report["whole"] = f"MemoryError: {exc}"
    print(json.dumps(report), flush=True)


def run_job(root: Path) -> dict:
    code = f"from tests.integration.test_larger_than_memory import job; job({str(root)!r})"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env={**os.environ, **ENV},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_an_epoch_on_photos_four_times_the_memory_budget(tmp_path):
    t0 = time.perf_counter()
    write_photos(tmp_path / "photos", N_PHOTOS)
    written_s = time.perf_counter() - t0
    trained = run_job(tmp_path)
    budget = trained["budget_bytes"]
    assert trained["images_type"] == "ShardedImages" and trained["n_items"] == N_PHOTOS
    assert trained["data_bytes"] >= 4 * budget
    assert trained["n_shards"] == math.ceil(trained["data_bytes"] / (SHARD_MB * 2**20))
    (epoch,) = trained["history"]
    assert epoch["epoch"] == 1 and math.isfinite(epoch["loss"])
    assert trained["data_size_after"] < budget
    assert trained["whole"].startswith("MemoryError"), trained["whole"]
    print(
        f"\n{N_PHOTOS} photos, {trained['data_bytes'] / 2**20:.0f} MiB prepared in "
        f"{trained['n_shards']} shards, budget {budget / 2**20:.0f} MiB over a base of "
        f"{trained['base_bytes'] / 2**20:.0f} MiB; photos written in {written_s:.1f} s, "
        f"prepared in {trained['prepare_s']:.1f} s, one epoch in {trained['train_s']:.1f} s "
        f"({epoch['images_per_sec']:.0f} img/s); max RSS {trained['max_rss_bytes'] / 2**20:.0f} "
        "MiB (shards' mapped pages included)"
    )
