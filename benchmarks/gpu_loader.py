"""Does the loader keep a GPU busy? The training loop's images/s when the loader feeds it photos
from shards on disk, against the same loop with the same images already on the card.

    python benchmarks/gpu_loader.py [--backbone resnet50] [--stored 256] [--size 224]
        [--batch 256] [--n 8192] [--workers 4 8 12] [--device cuda] [--quick]

The `photos` profile's case: images stored at --stored px as uint8 shards of 64 MiB (synthetic
noise: the loader's and the step's cost do not depend on the content), each training step a
random resized crop and flip to --size px on the card (train.augment), then the backbone under
the hashing head with SHDH's loss, bf16 autocast, channels_last, CUDA graphs and fused SGD as in
the gpu profile. Rows, each a fresh fit of two epochs and the second epoch's images/s (the first
pays for cuDNN's autotuner and the graph's capture):
- resident, no augmentation: the images copied to the card once, the step's own pace, the
  ceiling;
- resident, augmented: what the crops on the card cost;
- sharded, augmented, W loader workers: the images do not stay on the card (as for a set larger
  than it: the benchmark sets the resident share to 0), W processes read and gather each batch
  ahead into pinned memory. Their ratio to the resident augmented row is the share of the time
  the card is kept busy; the target is 0.9 or more.
The crops alone on the card, for a batch: one torchvision call per image (the CPU's way) against
one roi_align call for the batch (the card's way, shdh.nets.views). And the loader alone
(batches consumed, nothing trained), cold (the shards evicted from the page cache first) and
warm, per worker count. Not a test; on a CPU (--device cpu --quick) it checks
that the script runs.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from loader import loader_rate, loop_rate, write_shards  # benchmarks/loader.py
from provenance import commit_line, machine_line  # benchmarks/provenance.py

from shdh.bundle import device_line
from shdh.data.dataset import load_dataset
from shdh.nets.views import crop_box, crops_in_one_call, crops_one_by_one
from shdh.training import batches
from shdh.training.loop_settings import TrainConfig


def fit_rate(args: argparse.Namespace, images, work: Path, augment: bool, workers: int) -> float:
    cuda = args.device == "cuda"
    config = TrainConfig(
        backbone=args.backbone,
        image_size=args.size,
        augment=augment,
        n_bits=64,
        batch_size=args.batch,
        epochs=2,
        lr=0.001,
        device=args.device,
        num_threads=args.threads,
        loader_workers=workers,
        cuda_graph=cuda,
        fused_sgd=cuda,
    )
    return loop_rate(config, images, work, epoch=2)


def crop_ms(args: argparse.Namespace, crops, repeats: int = 20) -> float:
    """Milliseconds a batch's crops take on the device, after a warm-up call."""
    device = torch.device(args.device)
    generator = torch.Generator().manual_seed(0)
    shape = (args.batch, 3, args.stored, args.stored)
    x = torch.randint(0, 256, shape, dtype=torch.uint8, generator=generator).to(device)
    boxes = [crop_box(args.stored, args.stored, generator) for _ in range(args.batch)]
    crops(x, boxes, args.size)
    if device.type == "cuda":
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(repeats):
        crops(x, boxes, args.size)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return (time.perf_counter() - start) / repeats * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backbone", default="resnet50")
    parser.add_argument("--stored", type=int, default=256, help="stored side, px")
    parser.add_argument("--size", type=int, default=224, help="network input side, px")
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--n", type=int, default=8192, help="photos")
    parser.add_argument("--workers", type=int, nargs="+", default=[4, 8, 12])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--threads", type=int, default=4, help="torch CPU threads")
    parser.add_argument("--quick", action="store_true", help="resnet18, 64 px, 96 photos")
    args = parser.parse_args()
    if args.quick:
        args.backbone, args.stored, args.size, args.batch, args.n = "resnet18", 72, 64, 32, 96
        args.workers = args.workers[:1]
    torch.set_num_threads(args.threads)
    print(machine_line())
    print(commit_line())
    print(f"device: {device_line(torch.device(args.device))}")
    print(f"\n| crops alone, batch {args.batch}, {args.stored} -> {args.size} px "
          "| ms a batch |\n|---|---|")  # fmt: skip
    for crops in (crops_one_by_one, crops_in_one_call):
        print(f"| {crops.__name__} | {crop_ms(args, crops):.1f} |")
    with tempfile.TemporaryDirectory(prefix="shdh-gpu-loader-") as tmp:
        work = Path(tmp)
        folder = write_shards(work, args.n, args.stored)
        print(f"\n| loader alone, {args.n:,} photos at {args.stored} px, batch {args.batch} "
              "| workers | cold img/s | warm img/s |\n|---|---|---|---|")  # fmt: skip
        for workers in args.workers:
            cold = loader_rate(folder, args.batch, workers, True)
            warm = loader_rate(folder, args.batch, workers, False)
            print(f"| | {workers} | {cold:,.0f} | {warm:,.0f} |")
        what = f"{args.backbone} at {args.size} px from {args.stored} px, batch {args.batch}"
        print(f"\n| training loop, {what} | img/s | of resident augmented |\n|---|---|---|")
        in_memory = np.asarray(load_dataset(folder).images[np.arange(args.n)])
        ceiling = fit_rate(args, in_memory, work, False, 0)
        resident = fit_rate(args, in_memory, work, True, 0)
        del in_memory
        print(f"| resident, no augmentation | {ceiling:,.0f} | {ceiling / resident:.2f} |")
        print(f"| resident, augmented | {resident:,.0f} | 1.00 |")
        batches.RESIDENT_SHARE = 0.0  # as for a set larger than the card: the loader's path
        sharded = load_dataset(folder).images
        for workers in args.workers:
            rate = fit_rate(args, sharded, work, True, workers)
            share = rate / resident
            print(f"| sharded, augmented, {workers} workers | {rate:,.0f} | {share:.2f} |")


if __name__ == "__main__":
    main()
