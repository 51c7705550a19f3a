"""Does the CUDA-graph training step train as the eager one does, for every deep method asked
for? Per method, two short fits from one seed, eager and graphed, on Fashion-MNIST-H-sized
synthetic data, through the method's own hasher (its objective, its code layout, its epoch
hooks: HashNet's continuation, HPDH's centres); their per-epoch losses must agree. With
--fused-sgd the graphed fits also run SGD as one fused kernel (the gpu profile's
train.fused_sgd), against eager steps with torch's default SGD.

    python benchmarks/gpu_graph_check.py [--device cuda] [--methods shdh dpsh ...]
        [--n-train 6400] [--epochs 3] [--fused-sgd]

A graph replays what it captured: state a method changed between steps in any other way than in
place on its tensors would be read stale, silently. So each method's check is what stands
between a new method and a wrong GPU table. On a GPU the two fits are not bit-identical (cuDNN
and bf16 reductions are not deterministic from run to run, eager or not), so the check is a
tolerance: every epoch's mean loss within --tolerance (relative) of the eager one, and the graph
captured, with no capture failure (which would train eagerly: correct, but at a third of the
speed, and a methods protocol then overruns its call). Exit status 0 when every method agrees,
1 when one does not: benchmarks/gpu_session.sh trains eagerly then. Not a test: it needs a GPU.
"""

from __future__ import annotations

import argparse
import logging
import sys
from dataclasses import replace

import numpy as np
from gpu_epoch import fashion_mnist_sized  # benchmarks/gpu_epoch.py

from shdh.core.level_weights import layer_weights
from shdh.hashers import hasher_class
from shdh.hashers.method_catalogue import method
from shdh.hashers.supervision import PairSimilarity
from shdh.runtime.devices import resolve_device
from shdh.training.loop_settings import LoopSettings

GRAPH_LOG = "shdh.training.cuda_graph_step"


class _Messages(logging.Handler):
    """The graph step's log lines: whether it captured, or fell back to eager steps."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.seen.append(record.getMessage())


def fit_losses(name: str, loop: LoopSettings, images: np.ndarray, anc: np.ndarray) -> list[float]:
    """Each epoch's mean loss of one 64-bit fit of the method, seed 0, as the pipeline fits it."""
    cls = hasher_class(name)
    pairs = PairSimilarity(anc, layer_weights(anc.shape[1]), cls.supervision or "label")
    hasher = cls(n_bits=64, seed=0, loop=loop).fit(images, pairs)
    return [entry["loss"] for entry in hasher.history_]


def check(name: str, loop: LoopSettings, fused_sgd: bool, tolerance: float, images, anc) -> bool:
    """One method's eager and graphed fits, their table, and whether they agree."""
    eager = fit_losses(name, loop, images, anc)
    messages = _Messages()
    logger = logging.getLogger(GRAPH_LOG)
    logger.addHandler(messages)
    try:
        graphed_loop = replace(loop, cuda_graph=True, fused_sgd=fused_sgd)
        graphed = fit_losses(name, graphed_loop, images, anc)
    finally:
        logger.removeHandler(messages)
    captured = any("captured" in m for m in messages.seen)
    failed = [m for m in messages.seen if "failed" in m]
    for message in messages.seen:
        print(f"log: {message}")
    sgd = "fused SGD" if fused_sgd else "default SGD"
    print(f"\n{name}:\n\n| epoch | eager loss | CUDA-graph loss ({sgd}) | relative difference |")
    print("|---:|---:|---:|---:|")
    worst = 0.0
    for epoch, (a, b) in enumerate(zip(eager, graphed, strict=True), start=1):
        diff = abs(a - b) / max(abs(a), 1e-12)
        worst = max(worst, diff)
        print(f"| {epoch} | {a:.5f} | {b:.5f} | {diff:.2e} |")
    on_card = loop.device != "cpu"
    ok = worst <= tolerance and not failed and (captured or not on_card)
    where = "" if on_card else "on the CPU the loop runs eager steps either way"
    print(
        f"{name}: CUDA graph vs eager: largest relative difference {worst:.2e}: "
        f"{'AGREE' if ok else 'DIFFER'} (tolerance {tolerance}) {where}".rstrip()
    )
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--methods", nargs="+", default=["shdh"], help="deep methods to check")
    parser.add_argument("--n-train", type=int, default=6400)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--width", type=float, default=1.0)
    parser.add_argument("--tolerance", type=float, default=0.02)
    parser.add_argument("--fused-sgd", action="store_true", help="fused SGD in the graphed fits")
    args = parser.parse_args()
    try:
        device = resolve_device(args.device)
        shallow = [name for name in args.methods if not method(name).deep]
        if shallow:
            raise ValueError(f"--methods: {shallow} are not deep methods")
    except ValueError as err:
        raise SystemExit(f"gpu_graph_check.py: {err}") from err
    logging.getLogger(GRAPH_LOG).setLevel(logging.INFO)
    images, anc = fashion_mnist_sized(args.n_train)
    # The gpu profile's loop at a short budget; a fixed schedule, so both fits run every epoch.
    loop = LoopSettings(
        width=args.width, lr=0.005, epochs=args.epochs, device=device.type, bf16=True
    )
    agree = [
        name
        for name in args.methods
        if check(name, loop, args.fused_sgd, args.tolerance, images, anc)
    ]
    differ = [name for name in args.methods if name not in agree]
    print(f"\nagree: {' '.join(agree) or '-'}; differ: {' '.join(differ) or '-'}")
    return 0 if not differ else 1


if __name__ == "__main__":
    sys.exit(main())
