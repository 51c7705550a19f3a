"""One batch-norm step of several processes, taken by tests/unit/distributed_fit.py after its
fit (the process group is joined then): every rank normalises its part of a fixed batch with
shdh.training.distributed's CPU batch norm, and saves its output, the input's gradient and the
running statistics, which tests/unit/test_distributed.py compares with one plain batch norm
over the whole batch."""

from __future__ import annotations

from pathlib import Path

import torch
from torch import nn

from shdh.training.distributed import World, synced_batch_norm

SHAPE = (8, 3, 5, 5)  # the whole batch; each rank takes its consecutive rows


def batch() -> tuple[torch.Tensor, torch.Tensor]:
    """The batch and the output weights a loss takes the sum against (not symmetric, so that
    the gradient depends on the statistics' gradients)."""
    generator = torch.Generator().manual_seed(0)
    x = 3 + 2 * torch.randn(SHAPE, generator=generator)
    return x, torch.randn(SHAPE, generator=generator)


def save_step(out_dir: Path, world: World) -> None:
    x, w = batch()
    rows = slice(world.rank * len(x) // world.size, (world.rank + 1) * len(x) // world.size)
    model = synced_batch_norm(nn.Sequential(nn.BatchNorm2d(3)), torch.device("cpu"))
    mine = x[rows].clone().requires_grad_(True)
    y = model(mine)
    (y * w[rows]).sum().backward()
    bn = model[0]
    torch.save(
        {
            "y": y.detach(),
            "grad": mine.grad,
            "running_mean": bn.running_mean,
            "running_var": bn.running_var,
        },
        Path(out_dir) / f"bn-rank{world.rank}.pt",
    )
