"""Encoding a deep fit's 70,000 images against the network's own inference speed.

Target (issue 54): the deep rows' images encoded at the network's inference speed (batching,
threads, no per-item Python): the encode path (shdh.training.inference.encode, what a deep
hasher's `encode` and so the score and index steps run) at 0.9 or more of the bare network
forward over the same images, batch and threads, with the conversion to float done beforehand.

    python benchmarks/encode_speed.py [--models artifacts/models] [--fits shdh-64 dpsh-64]
        [--batches 128 512 2048] [--n-images 70000] [--quick]

After `make run` (or `dvc repro`): the deep fits' saved hashers and the prepared images. Each fit
is timed, in this order and in one process with the CPU pin a front door sets (params.yaml's
threads): hasher.encode over the images (the memory-mapped uint8 array, as the score step
passes it); the conversion alone (the network's encoding_input, batch by batch); the network
alone on the converted input at each --batches size, with whether its outputs are bit-identical
to encode's (a batch that changed them would change the codes). The best of --repeats runs of
each. --quick: 5,000 images, one repeat. Not a test.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from shdh.runtime.instruction_set import pin_cpu

pin_cpu()  # before numpy and torch load, as every front door does

import numpy as np  # noqa: E402
import torch  # noqa: E402
from provenance import commit_line, machine_line  # noqa: E402 (benchmarks/provenance.py)

from shdh.hashers import load_hasher  # noqa: E402
from shdh.steps.prepare import load_prepared  # noqa: E402
from shdh.training import inference  # noqa: E402

TARGET_RATIO = 0.9


def best_of(repeats: int, fn) -> tuple[float, object]:
    best, out = float("inf"), None
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - start)
    return best, out


@torch.no_grad()
def bare_forward(model, x: torch.Tensor, batch: int) -> torch.Tensor:
    model.eval()
    return torch.cat([model(x[s : s + batch]).float() for s in range(0, len(x), batch)])


def measure(name: str, hasher, images: np.ndarray, args: argparse.Namespace) -> list[str]:
    model, n = hasher.model_, len(images)
    batch = inference.encode_batch(model)
    enc_s, codes = best_of(args.repeats, lambda: hasher.encode(images))
    with torch.no_grad():
        conv_s, parts = best_of(
            args.repeats,
            lambda: [
                model.encoding_input(images[s : s + batch], "cpu") for s in range(0, n, batch)
            ],
        )
    x = torch.cat(parts)
    rows = [f"| {name} | encode (batch {batch}) | {enc_s:.2f} | {n / enc_s:,.0f} | - |"]
    rows.append(f"| {name} | conversion to float alone | {conv_s:.2f} | {n / conv_s:,.0f} | - |")
    for size in args.batches:
        net_s, z = best_of(args.repeats, lambda size=size: bare_forward(model, x, size))
        same = np.array_equal(inference.signs(z).numpy(), codes)
        ratio = f"{(n / enc_s) / (n / net_s):.2f}" if size == batch else "-"
        rows.append(
            f"| {name} | network alone, batch {size} | {net_s:.2f} | {n / net_s:,.0f} | "
            f"{ratio} (codes {'equal' if same else 'DIFFER'}) |"
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="artifacts/models")
    parser.add_argument("--prepared", default="artifacts/prepared")
    parser.add_argument("--fits", nargs="+", default=["shdh-64", "dpsh-64"])
    parser.add_argument("--batches", type=int, nargs="+", default=[128, 512, 2048])
    parser.add_argument("--n-images", type=int, default=70000)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--quick", action="store_true", help="5,000 images, one repeat")
    args = parser.parse_args()
    if args.quick:
        args.n_images, args.repeats = 5000, 1
    dataset, _ = load_prepared(args.prepared)
    images = dataset.images[: args.n_images]
    print(f"machine: {machine_line()}")
    print(commit_line())
    print(f"{len(images):,} images {tuple(images.shape[1:])}, {torch.get_num_threads()} threads")
    print("\n| fit | what | seconds | images/s | encode / network |")
    print("|---|---|---:|---:|---|")
    for name in args.fits:
        method = name.split("-")[0]
        hasher = load_hasher(Path(args.models) / method / name / "hasher")
        for row in measure(name, hasher, images, args):
            print(row, flush=True)
    print(f"\ntarget: encode at >= {TARGET_RATIO} of the network alone at encode's batch")


if __name__ == "__main__":
    main()
