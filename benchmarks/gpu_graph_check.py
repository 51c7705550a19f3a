"""Does the CUDA-graph training step train as the eager one does? Two short fits from one seed,
eager and graphed, on Fashion-MNIST-H-sized synthetic data; their per-epoch losses must agree.
With --fused-sgd the graphed fit also runs SGD as one fused kernel (the gpu profile's
train.fused_sgd), against eager steps with torch's default SGD.

    python benchmarks/gpu_graph_check.py [--device cuda] [--n-train 6400] [--epochs 3]
        [--fused-sgd]

On a GPU the two are not bit-identical (cuDNN and bf16 reductions are not deterministic from run
to run, eager or not), so the check is a tolerance: every epoch's mean loss within --tolerance
(relative) of the eager one, and the graph replayed. Exit status 0 when they agree, 1 when not:
benchmarks/gpu_session.sh trains eagerly then. Not a test: it needs a GPU.
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import replace

import numpy as np
from gpu_epoch import fashion_mnist_sized, the_loop  # benchmarks/gpu_epoch.py

from shdh.runtime.devices import resolve_device
from shdh.training.loop_settings import TrainConfig


def fit_losses(config: TrainConfig, images: np.ndarray, anc: np.ndarray) -> list[float]:
    return [entry["loss"] for entry in the_loop(config, images, anc)]


class _Messages(logging.Handler):
    """The graph step's log lines: whether it captured, or fell back to eager steps."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(record.getMessage())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--n-train", type=int, default=6400)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--width", type=float, default=1.0)
    parser.add_argument("--tolerance", type=float, default=0.02)
    parser.add_argument("--fused-sgd", action="store_true", help="fused SGD in the graphed fit")
    args = parser.parse_args()
    try:
        device = resolve_device(args.device)
    except ValueError as err:
        raise SystemExit(f"gpu_graph_check.py: {err}") from err
    images, anc = fashion_mnist_sized(args.n_train)
    config = TrainConfig(
        n_bits=64, width=args.width, lr=0.005, epochs=args.epochs, device=args.device, seed=0
    )
    eager = fit_losses(config, images, anc)
    messages = _Messages()
    logging.getLogger("shdh.training.cuda_graph_step").addHandler(messages)
    logging.getLogger("shdh.training.cuda_graph_step").setLevel(logging.INFO)
    graphed = fit_losses(replace(config, cuda_graph=True, fused_sgd=args.fused_sgd), images, anc)
    captured = any("captured" in m for m in messages.seen)
    failed = [m for m in messages.seen if "failed" in m]
    for message in messages.seen:
        print(f"log: {message}")
    sgd = "fused SGD" if args.fused_sgd else "default SGD"
    print(f"| epoch | eager loss | CUDA-graph loss ({sgd}) | relative difference |")
    print("|---:|---:|---:|---:|")
    worst = 0.0
    for epoch, (a, b) in enumerate(zip(eager, graphed, strict=True), start=1):
        diff = abs(a - b) / abs(a)
        worst = max(worst, diff)
        print(f"| {epoch} | {a:.5f} | {b:.5f} | {diff:.2e} |")
    ok = worst <= args.tolerance and not failed and (captured or device.type != "cuda")
    where = "on the CPU the loop runs eager steps either way" if device.type != "cuda" else ""
    print(
        f"CUDA graph vs eager: largest relative difference {worst:.2e}: "
        f"{'AGREE' if ok else 'DIFFER'} (tolerance {args.tolerance}) {where}".rstrip()
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
