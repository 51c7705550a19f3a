"""Does the loader keep up? Images/s that shdh.training.loader.Loader feeds from shards, against
the images/s of a training step, on this machine.

    python benchmarks/loader.py [--n64 16384] [--n224 4096] [--batch 256] [--workers 0 1 2]
        [--threads 2] [--quick]

Data: synthetic uint8 RGB images at 64 and 224 px written as shards of 64 MiB
(shdh.data.dataset.save_dataset with shard_mb), read back as a ShardedImages. The loader rows:
one epoch in a random order at batch --batch, with 0 (in this process), 1 and 2 worker processes,
the batches only consumed; "cold" first evicts the shards from the page cache
(posix_fadvise DONTNEED), so the pass reads the disk, "warm" reads the page cache. The step rows:
a plain SGD step (forward, loss, backward, update) on a batch already in memory as uint8, the
conversion to the network's float input included: the project's CNN-F at width 0.125 with its
32 px input (fed 64 px and 224 px images, resized), and torchvision's resnet18 at 64 px when
torchvision is installed, on random targets. The loop rows: shdh.training.loop.train for one
epoch on each set of shards with train.loader_workers 0, 1 and 2, the CNN-F at width 0.125,
batch --batch: what a fit sees when the loader and the step share the CPUs. Not a test.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from provenance import commit_line, machine_line  # benchmarks/provenance.py

from shdh.core.image_input import to_input
from shdh.data.dataset import Dataset, load_dataset, save_dataset
from shdh.hashers.shdh import shdh_objective
from shdh.nets.hashing import build_model
from shdh.training.loader import Loader
from shdh.training.loop import train
from shdh.training.loop_settings import TrainConfig

SHARD_MB = 64


def write_shards(folder: Path, n: int, side: int) -> Path:
    """n random side x side RGB images as a sharded dataset."""
    rng = np.random.default_rng(side)
    images = np.empty((n, side, side, 3), np.uint8)
    for start in range(0, n, 1024):
        block = images[start : start + 1024]
        block[...] = rng.integers(0, 256, block.shape, dtype=np.uint8)  # no int64 temporary
    labels = np.array([f"a/b{i % 4}" for i in range(n)])
    ds = Dataset(images, labels, np.arange(n, dtype=np.int64), f"bench{side}")
    return save_dataset(ds, folder / f"px{side}", shard_mb=SHARD_MB)


def evict(folder: Path) -> None:
    """Drop the shards' pages from the page cache, so the next read comes from the disk."""
    for path in sorted((folder / "images").iterdir()):
        with open(path, "rb") as f:
            os.fsync(f.fileno())
            os.posix_fadvise(f.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)


def loader_rate(folder: Path, batch: int, workers: int, cold: bool) -> float:
    """Images/s of one epoch of loader batches, in a random order, only consumed."""
    images = load_dataset(folder).images
    n = len(images)
    loader = Loader(images, np.arange(n), batch, workers)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(0))
    try:
        if workers:  # start the workers before the clock: a fit starts them once
            next(loader.epoch(order[:batch]))
        if cold:
            evict(folder)
        t0 = time.perf_counter()
        seen = sum(len(b) for b in loader.epoch(order))
        return seen / (time.perf_counter() - t0)
    finally:
        loader.close()


def step_rate(model: torch.nn.Module, images: np.ndarray, size: int, classes: bool) -> float:
    """Images/s of plain SGD steps on one uint8 batch (conversion to float included)."""
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    target = torch.randint(0, 10, (len(images),)) if classes else None
    model.train()

    def step() -> None:
        out = model(to_input(images, size))
        loss = torch.nn.functional.cross_entropy(out, target) if classes else out.pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()

    step()
    steps, t0 = 0, time.perf_counter()
    while steps < 3 or time.perf_counter() - t0 < 3:
        step()
        steps += 1
    return steps * len(images) / (time.perf_counter() - t0)


def step_rows(batch: int) -> list[tuple[str, float]]:
    rng = np.random.default_rng(0)
    rows = []
    for side in (64, 224):
        images = rng.integers(0, 256, (batch, side, side, 3), dtype=np.uint8)
        net = build_model(in_channels=3, n_bits=64, width=0.125, image_size=32)
        what = f"CNN-F width 0.125, 32 px input, fed {side} px"
        rows.append((what, step_rate(net, images, 32, False)))
    try:
        import torchvision
    except ImportError:
        rows.append(("torchvision resnet18 at 64 px", float("nan")))
        return rows
    images = rng.integers(0, 256, (batch, 64, 64, 3), dtype=np.uint8)
    net = torchvision.models.resnet18(num_classes=10)
    rows.append(("torchvision resnet18, 64 px", step_rate(net, images, 64, True)))
    return rows


def loop_rate(config: TrainConfig, images, work: Path, epoch: int = 1) -> float:
    """The images/s of epoch `epoch` of shdh's training loop on `images` (a sharded dataset's
    images or an array), 4 leaves under 2 superclasses, SHDH's loss."""
    n = len(images)
    anc = np.array([[0, 1 + i % 2, 3 + i % 4] for i in range(n)])
    sizes, levels, u = [32, 32], [2, 3], [0.0, 2 / 3, 1 / 3]
    name = f"run-{config.backbone}-{config.image_size}-{config.loader_workers}-{time.time_ns()}"
    result = train(config, images, anc, np.arange(n), work / name,
                   segment_sizes=sizes, segment_levels=levels, layer_weights=u,
                   objective=shdh_objective(sizes, levels, u))  # fmt: skip
    return result.history[epoch - 1]["images_per_sec"]


def cnnf_loop_rate(folder: Path, batch: int, workers: int, threads: int, work: Path) -> float:
    """The epoch's images/s of shdh's training loop on the shards, CNN-F width 0.125."""
    config = TrainConfig(n_bits=64, width=0.125, image_size=32, batch_size=batch, epochs=1,
                         device="cpu", num_threads=threads, loader_workers=workers)  # fmt: skip
    return loop_rate(config, load_dataset(folder).images, work)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n64", type=int, default=16384, help="64 px images")
    parser.add_argument("--n224", type=int, default=4096, help="224 px images")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads of the steps")
    parser.add_argument("--quick", action="store_true", help="2,048 and 512 images")
    args = parser.parse_args()
    if args.quick:
        args.n64, args.n224 = 2048, 512
    torch.set_num_threads(args.threads)
    print(machine_line())
    print(commit_line())
    with tempfile.TemporaryDirectory(prefix="shdh-loader-bench-") as tmp:
        work = Path(tmp)
        folders = {64: write_shards(work, args.n64, 64), 224: write_shards(work, args.n224, 224)}
        print(f"\n| loader, batch {args.batch} | workers | cold img/s | warm img/s | MiB/s warm |")
        print("|---|---|---|---|---|")
        for side, folder in folders.items():
            for workers in args.workers:
                cold = loader_rate(folder, args.batch, workers, True)
                warm = loader_rate(folder, args.batch, workers, False)
                mib = warm * side * side * 3 / 2**20
                print(f"| {side} px shards | {workers} | {cold:,.0f} | {warm:,.0f} | {mib:,.0f} |")
        print(f"\n| training step, batch {args.batch}, {args.threads} threads | img/s |")
        print("|---|---|")
        for what, rate in step_rows(args.batch):
            print(f"| {what} | {rate:,.0f} |")
        print(f"\n| shdh loop, CNN-F 0.125, batch {args.batch} | loader_workers | img/s |")
        print("|---|---|---|")
        for side, folder in folders.items():
            for workers in args.workers:
                rate = cnnf_loop_rate(folder, args.batch, workers, args.threads, work)
                n = args.n64 if side == 64 else args.n224
                print(f"| one epoch, {n:,} images at {side} px | {workers} | {rate:,.0f} |")


if __name__ == "__main__":
    main()
