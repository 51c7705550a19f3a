"""SHDH training on a GPU: images per second at full width with bf16 autocast, and the epoch
time for CIFAR-100-sized data (54,000 images).

Issue 6, training: "On a GPU, when you have one: images per second at full width, with bf16
autocast, and the epoch time for CIFAR-100-sized data (54,000 images)."

    python benchmarks/gpu_epoch.py [--device cuda] [--width 1.0] [--n-train 54000]
        [--batch 128] [--bits 64] [--epochs 2] [--no-bf16] [--threads N] [--quick]

Runs the real `shdh.training.train` (the loop the pipeline's train stage uses: batches built
in place from uint8 images, the SHDH loss, gradient clipping, a checkpoint every epoch) on
synthetic 32x32 RGB images labelled with the CIFAR-100 tree (20 superclasses > 100 classes,
K = 3). 54,000 is CIFAR-100's 60,000 less a 10% query split. Synthetic pixels cost the step
what real ones do; only the loss values differ.

The first epoch carries the one-off costs (CUDA context, cuDNN autotuning, allocator growth),
so the steady figures are the last epoch's; every epoch is printed. With --device cuda and no
CUDA device the script stops with that message, rather than timing the CPU under a GPU label.
--quick (2,000 images, one epoch) checks the script in seconds; `--device cpu --width 0.125
--quick` runs it anywhere. Not a test.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path

import numpy as np
import torch
from provenance import commit_line, machine_line  # benchmarks/provenance.py

from shdh import hierarchy, training

IMAGE_SIZE = 32


def cifar100_sized(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """n uint8 (32, 32, 3) images and their CIFAR-100 ancestor rows (random leaves)."""
    tree = hierarchy.cifar100_tree()
    rng = np.random.default_rng(seed)
    leaves = np.asarray(tree.leaves)
    images = rng.integers(0, 256, size=(n, IMAGE_SIZE, IMAGE_SIZE, 3), dtype=np.uint8)
    return images, tree.ancestors(leaves[rng.integers(0, len(leaves), size=n)])


def device_line(device: str) -> str:
    """The card the figures belong to (its name and memory), or the CPU."""
    if device != "cuda":
        return "device: cpu"
    props = torch.cuda.get_device_properties(0)
    return (
        f"device: {props.name}, {props.total_memory / 2**30:.0f} GiB, CUDA {torch.version.cuda}, "
        f"cuDNN {torch.backends.cudnn.version()}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--width", type=float, default=1.0, help="CNN-F width (1.0: the paper's)")
    parser.add_argument("--n-train", type=int, default=54_000)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--bits", type=int, default=64)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--no-bf16", action="store_true", help="fp32 on the GPU, for the ratio")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--quick", action="store_true", help="2,000 images, one epoch")
    args = parser.parse_args()
    if args.quick:
        args.n_train, args.epochs = 2000, 1
    if args.device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("gpu_epoch.py: --device cuda, but torch sees no CUDA device")

    K = 3
    images, anc = cifar100_sized(args.n_train)
    config = training.TrainConfig(
        n_bits=args.bits, width=args.width, image_size=IMAGE_SIZE, batch_size=args.batch,
        lr=0.005, epochs=args.epochs, device=args.device, bf16=not args.no_bf16,
        num_threads=args.threads, seed=0,
    )  # fmt: skip
    print(f"machine: {machine_line()}")
    print(commit_line())
    print(device_line(args.device))
    precision = "bf16 autocast" if args.device == "cuda" and config.bf16 else "fp32"
    print(f"CNN-F width {args.width}, batch {args.batch}, {args.bits} bits, {precision}, "
          f"{args.n_train:,} images of 32x32x3, {args.epochs} epochs")  # fmt: skip
    if args.device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    with tempfile.TemporaryDirectory(prefix="shdh-gpu-epoch-") as tmp:
        result = training.train(
            config, images, anc, np.arange(args.n_train), Path(tmp),
            segment_sizes=hierarchy.segment_sizes(args.bits, K),
            segment_levels=hierarchy.segment_levels(K),
            layer_weights=hierarchy.layer_weights(K).tolist(), progress=False,
        )  # fmt: skip

    print("\n| epoch | seconds | images/s |")
    print("|---:|---:|---:|")
    for entry in result.history:
        print(f"| {entry['epoch']} | {entry['seconds']:.1f} | {entry['images_per_sec']:,.0f} |")
    last = result.history[-1]
    print(f"\nsteady (last epoch): {last['images_per_sec']:,.0f} images/s, "
          f"{last['seconds']:.1f} s per epoch of {args.n_train:,} images")  # fmt: skip
    if args.device == "cuda":
        print(f"peak GPU memory: {torch.cuda.max_memory_allocated() / 2**30:.2f} GiB")


if __name__ == "__main__":
    main()
