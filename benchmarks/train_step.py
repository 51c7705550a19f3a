"""SHDH's training step against a plain cross-entropy step, and data waiting in the real loop.

Targets (same machine, same batch):
- SHDH's training step costs at most 1.15x a plain cross-entropy classification step of the
  same backbone: the hashing head and the pairwise loss must be nearly free;
- data loading never starves the step: waiting for data is under 10% of the step time.

    python benchmarks/train_step.py [--width 0.125] [--batch 128] [--bits 64] [--threads N]
        [--rounds 15] [--n-train 10000] [--quick]

Steps: the same CNN-F backbone (width, 32x32 input, one channel as Fashion-MNIST), the same
batch on the same threads, in train mode, forward + backward + SGD step (momentum 0.9, weight
decay 5e-4), as shdh.training.loop's loop does them:
  (a) SHDH: the hashing head (--bits units, K = 4 segments layout), the default SHDHObjective
      (E1 levels, E2 balance, sum over partners), loss.item(), and the
      loop's gradient clipping (grad_clip 10, on by default); also shown without clipping;
  (b) cross-entropy: a linear classifier head over the 10 leaf classes, nn.CrossEntropyLoss,
      loss.item(), no clipping (what a plain classification step is).
Each round runs 3 steps of each, alternating which goes first; the median per-step time over
rounds is reported, after warm-up steps.

Data waiting: shdh.training.loop's loop has no data loader; each step builds its batch in place
(`to_input(images[train_idx[pos]])` from the memory-mapped uint8 images, then the ancestor
rows). So the script runs the real `shdh.training.loop.train` for one epoch on --n-train synthetic
28x28 images memory-mapped from a .npy file, as the pipeline loads them, with two probes: the
image array times its batch-sized fancy indexing, and the training step's `to_input` is wrapped to
time the batch conversion (calls larger than a batch are the probe-set forwards outside the
epoch clock, and are not counted). Share = that time / the epoch seconds the loop records.
Not a test.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from provenance import commit_line, machine_line  # benchmarks/provenance.py
from torch import nn

from shdh.core import level_weights
from shdh.data import fashion_mnist
from shdh.hashers.shdh import shdh_objective
from shdh.nets.cnnf import CNNF, to_input
from shdh.nets.hashing import build_model
from shdh.training import loop
from shdh.training import step as training_step
from shdh.training.loop_settings import TrainConfig

TARGET_RATIO = 1.15
TARGET_WAIT = 0.10
K = 4  # Fashion-MNIST-H: root, 2 superclasses, 6 groups, 10 classes


def synthetic_data(n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n uint8 28x28 images, their leaf class (0..9) and Fashion-MNIST-H ancestor rows."""
    tree = fashion_mnist.label_tree()
    rng = np.random.default_rng(seed)
    leaves = np.asarray(tree.leaves)
    classes = rng.integers(0, len(leaves), size=n)
    images = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    return images, classes, tree.ancestors(leaves[classes])


def config(args: argparse.Namespace, **changes) -> TrainConfig:
    """The pipeline's deep-training settings (params.yaml) at this script's sizes."""
    return TrainConfig(
        n_bits=args.bits,
        width=args.width,
        image_size=32,
        batch_size=args.batch,
        lr=0.005,
        device="cpu",
        num_threads=args.threads,
        seed=0,
        **changes,
    )


def default_objective(bits: int):
    """SHDH's default objective for this script's layout (K = 4 segments of `bits`)."""
    return shdh_objective(
        level_weights.segment_sizes(bits, K),
        level_weights.segment_levels(K),
        level_weights.layer_weights(K).tolist(),
    )


# --- (1) one step each, side by side --------------------------------------------------------


def shdh_step(args: argparse.Namespace, clip: bool) -> Callable[[torch.Tensor, dict], None]:
    cfg = config(args)
    torch.manual_seed(0)
    model = build_model(
        in_channels=1,
        n_bits=args.bits,
        width=args.width,
        image_size=32,
        segment_sizes=level_weights.segment_sizes(args.bits, K),
    ).train()
    loss_fn = default_objective(args.bits)
    opt = torch.optim.SGD(
        model.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay
    )

    def step(x: torch.Tensor, batch: dict) -> None:
        z = model(x)
        loss, parts = loss_fn(z.float(), batch["anc"], None)
        loss.detach().item()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        if clip:
            nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        float(parts["e1"]), float(parts["e2"])

    return step


def ce_step(args: argparse.Namespace) -> Callable[[torch.Tensor, dict], None]:
    torch.manual_seed(0)
    backbone = CNNF(1, width=args.width, image_size=32)
    model = nn.Sequential(backbone, nn.Linear(backbone.out_features, 10)).train()
    criterion = nn.CrossEntropyLoss()
    opt = torch.optim.SGD(model.parameters(), lr=0.005, momentum=0.9, weight_decay=5e-4)

    def step(x: torch.Tensor, batch: dict) -> None:
        loss = criterion(model(x), batch["y"])
        loss.detach().item()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    return step


def step_times(args: argparse.Namespace) -> dict[str, float]:
    images, classes, anc = synthetic_data(args.batch, seed=1)
    x = to_input(images, 32, "cpu")
    batch = {
        "anc": torch.as_tensor(anc, dtype=torch.long),
        "y": torch.as_tensor(classes, dtype=torch.long),
    }
    steps = {
        "ce": ce_step(args),
        "shdh": shdh_step(args, clip=True),
        "shdh_noclip": shdh_step(args, clip=False),
    }
    for step in steps.values():
        for _ in range(3):  # warm-up
            step(x, batch)
    per_step: dict[str, list[float]] = {name: [] for name in steps}
    names = list(steps)
    for r in range(args.rounds):
        for name in names[r % 3 :] + names[: r % 3]:  # rotate the order
            start = time.perf_counter()
            for _ in range(3):
                steps[name](x, batch)
            per_step[name].append((time.perf_counter() - start) / 3)
    return {name: statistics.median(ts) for name, ts in per_step.items()}


# --- (2) data waiting inside the real loop -----------------------------------------------------


class _TimedImages(np.ndarray):
    """The image array, timing batch-sized fancy indexing (the loop's `images[train_idx[pos]]`)."""

    batch_size = 0
    seconds = 0.0

    def __getitem__(self, key):
        start = time.perf_counter()
        out = np.asarray(super().__getitem__(key))
        if isinstance(key, np.ndarray) and 0 < key.size <= _TimedImages.batch_size:
            _TimedImages.seconds += time.perf_counter() - start
        return out


def data_wait(args: argparse.Namespace) -> tuple[float, float, float]:
    """(data seconds, epoch seconds, images/s) of one real epoch of shdh.training.loop.train."""
    images, _, anc = synthetic_data(args.n_train, seed=2)
    convert = {"seconds": 0.0}
    real_to_input = training_step.to_input

    def timed_to_input(batch, image_size, device=None):
        start = time.perf_counter()
        out = real_to_input(batch, image_size, device)
        if len(batch) <= args.batch:
            convert["seconds"] += time.perf_counter() - start
        return out

    with tempfile.TemporaryDirectory(prefix="shdh-train-step-") as tmp:
        np.save(Path(tmp) / "images.npy", images)
        mapped = np.load(Path(tmp) / "images.npy", mmap_mode="r").view(_TimedImages)
        _TimedImages.batch_size, _TimedImages.seconds = args.batch, 0.0
        training_step.to_input = timed_to_input
        try:
            result = loop.train(
                config(args, epochs=1),
                mapped,
                anc,
                np.arange(args.n_train),
                Path(tmp) / "run",
                segment_sizes=level_weights.segment_sizes(args.bits, K),
                segment_levels=level_weights.segment_levels(K),
                layer_weights=level_weights.layer_weights(K).tolist(),
                progress=None,
                objective=default_objective(args.bits),
            )
        finally:
            training_step.to_input = real_to_input
    epoch = result.history[0]
    return _TimedImages.seconds + convert["seconds"], epoch["seconds"], epoch["images_per_sec"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--width", type=float, default=0.125, help="CNN-F width (pipeline: 0.125)")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--bits", type=int, default=64)
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--n-train", type=int, default=10_000, help="images in the loop's epoch")
    parser.add_argument("--quick", action="store_true", help="5 rounds, a 2,000-image epoch")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.n_train = 5, 2000
    torch.set_num_threads(args.threads)

    print(f"machine: {machine_line()}")
    print(f"{commit_line()}")
    print(
        f"CNN-F width {args.width}, batch {args.batch}, {args.bits} bits, {args.threads} torch "
        f"threads; median of {args.rounds} rounds of 3 steps each"
    )
    t = step_times(args)
    data_s, epoch_s, ips = data_wait(args)
    ratio, ratio_noclip = t["shdh"] / t["ce"], t["shdh_noclip"] / t["ce"]
    share = data_s / epoch_s

    print("\n| training | measured | target | ratio | result |")
    print("|---|---:|---:|---:|---|")
    print(
        f"| cross-entropy step (linear head, 10 classes) | {t['ce'] * 1e3:.1f} ms | - | 1.00 | - |"
    )
    verdict = "PASS" if ratio <= TARGET_RATIO else "FAIL"
    print(
        f"| SHDH step as trained (hashing head, SHDH loss, grad clipping) | "
        f"{t['shdh'] * 1e3:.1f} ms | <= {TARGET_RATIO}x CE | {ratio:.3f} | {verdict} |"
    )
    print(
        f"| SHDH step without grad clipping (for reference) | {t['shdh_noclip'] * 1e3:.1f} ms "
        f"| - | {ratio_noclip:.3f} | - |"
    )
    verdict = "PASS" if share < TARGET_WAIT else "FAIL"
    print(
        f"| data wait in shdh.training.loop.train, one epoch of {args.n_train:,} images | "
        f"{data_s:.2f} s of {epoch_s:.2f} s ({ips:,.0f} img/s) | < 10% | {share:.1%} | "
        f"{verdict} |"
    )


if __name__ == "__main__":
    main()
