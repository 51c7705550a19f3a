"""What the several-process path costs on one card: the training loop as one process runs it,
against the same fit taking the path every rank of a Kubeflow TrainJob takes.

    python benchmarks/ddp_cost.py [--backbone resnet18] [--size 224] [--batch 128] [--n 8192]
        [--device cuda] [--quick]

A fit over several GPUs gives up two things the one-process loop has: the CUDA graph
(shdh.training.distributed refuses it: a graph cannot hold the ranks' collectives here) and the
plain modules (DistributedDataParallel's hooks, SyncBatchNorm, the all-gather of the codes). With
one GPU there is one rank, and a world of one process runs the plain loop, so this benchmark
makes that one process take the several-process path anyway (a process group of one, the
`distributed` switch forced on) and times it beside the plain loop with and without the graph.
Each row is a fresh fit of two epochs on the same noise images, resident on the card; the
second epoch's images/s (the first pays for cuDNN's autotuner and the graph's capture). What a
world of one leaves out: the collectives' traffic between cards (NCCL's all-reduce of the
gradients overlaps the backward pass) and, on a card, batch norm's synchronisation
(SyncBatchNorm computes plain batch norm when it is alone); so the row is the cost of giving up
the graph plus DDP's hooks and the all-gather, a floor of the multi-GPU step's overhead. On a
CPU (--device cpu, Gloo) the batch norms' sums are all-reduced even alone. Not a test;
`--device cpu --quick` checks that the script runs.
"""

from __future__ import annotations

import argparse
import os
import socket
import tempfile
from pathlib import Path

import numpy as np
import torch
from loader import loop_rate  # benchmarks/loader.py
from provenance import commit_line, machine_line  # benchmarks/provenance.py

from shdh.bundle import device_line
from shdh.training.distributed import World
from shdh.training.loop_settings import TrainConfig


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def one_rank_world() -> None:
    """torchrun's variables for a world of one, and the switch that makes it take the
    several-process path (DDP, synchronised batch norm, gathered codes)."""
    os.environ.update(
        RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(free_port()),
    )  # fmt: skip
    World.distributed = property(lambda self: True)  # type: ignore[method-assign]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backbone", default="resnet18")
    parser.add_argument("--size", type=int, default=224, help="network input side, px")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--n", type=int, default=8192, help="training images (32 px noise)")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--threads", type=int, default=4, help="torch CPU threads")
    parser.add_argument("--quick", action="store_true", help="64 px, 128 images, batch 32")
    args = parser.parse_args()
    if args.quick:
        args.size, args.n, args.batch = 64, 128, 32
    torch.set_num_threads(args.threads)
    cuda = args.device == "cuda"
    print(machine_line())
    print(commit_line())
    print(f"device: {device_line(torch.device(args.device))}")
    images = np.random.default_rng(0).integers(0, 256, (args.n, 32, 32, 3), np.uint8)

    def rate(graph: bool, work: Path) -> float:
        config = TrainConfig(
            backbone=args.backbone, image_size=args.size, n_bits=64, batch_size=args.batch,
            epochs=2, lr=0.001, device=args.device, num_threads=args.threads,
            cuda_graph=graph, fused_sgd=cuda,
        )  # fmt: skip
        return loop_rate(config, images, work, epoch=2)

    print(f"\n| {args.backbone} at {args.size} px, batch {args.batch}, one card | img/s | "
          "of plain eager |\n|---|---|---|")  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="shdh-ddp-cost-") as tmp:
        eager = rate(False, Path(tmp))
        if cuda:
            graphed = rate(True, Path(tmp))
            print(f"| one process, CUDA graph (the gpu profile) | {graphed:,.0f} | "
                  f"{graphed / eager:.2f} |")  # fmt: skip
        print(f"| one process, eager | {eager:,.0f} | 1.00 |")
        one_rank_world()
        ddp = rate(False, Path(tmp))
        print(f"| the several-process path, one rank (DDP, SyncBatchNorm, all-gather) | "
              f"{ddp:,.0f} | {ddp / eager:.2f} |")  # fmt: skip
        torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
