"""One fit over several processes: PyTorch data parallelism as torchrun starts it (Kubeflow
Trainer's torch-distributed runtime runs torchrun on every node; RANK, WORLD_SIZE and LOCAL_RANK
are torchrun's).

The fit is the one-process fit with a global batch of batch_size x world size: every rank takes
its consecutive part of each global batch of the seeded epoch order, the codes of the whole
global batch are gathered with their gradients, and every rank takes SHDH's or DPSH's loss over
all of them, because both losses pair every item with every other of the batch: a rank's own
items alone would be another, smaller batch. The gathered codes' gradients come back summed over
the ranks (each took the same loss), and DistributedDataParallel averages the parameters'
gradients, so a step's update is the one-process update of the global batch up to float sums.
Batch norm takes the global batch's statistics (SyncBatchNorm on GPUs, an all-reduce of the
ranks' sums on CPUs, where PyTorch has no SyncBatchNorm). Dropout is each rank's own draw, so a
network with dropout (CNN-F) follows the one-process fit in distribution, not to float sums. A
global batch that is not full is left out, as the ranks must gather codes of one shape. With one
process nothing here runs: a fit is bit for bit the plain loop's.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn


@dataclass(frozen=True)
class World:
    """This process's place among the fit's processes."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @classmethod
    def from_env(cls) -> World:
        """torchrun's RANK, WORLD_SIZE and LOCAL_RANK; one process when they are not set."""
        try:
            size = int(os.environ.get("WORLD_SIZE", "1"))
            rank, local = int(os.environ.get("RANK", "0")), int(os.environ.get("LOCAL_RANK", "0"))
        except ValueError as err:
            raise ValueError(f"RANK, WORLD_SIZE and LOCAL_RANK must be integers: {err}") from err
        if size < 1 or not 0 <= rank < size:
            raise ValueError(f"RANK={rank} is not a rank of WORLD_SIZE={size}")
        return cls(rank, size, local)

    @property
    def distributed(self) -> bool:
        return self.size > 1

    @property
    def main(self) -> bool:
        """Rank 0 alone writes checkpoints and outputs and logs."""
        return self.rank == 0

    def steps(self, n_items: int, batch_size: int) -> Iterator[tuple[int, slice, slice]]:
        """(step, this rank's positions, the global batch's) as slices of an epoch's order.

        One process: every batch of batch_size, but a lone trailing item (it has no partner to
        pair with), numbered as the plain loop numbers them. Several: the full global batches."""
        if not self.distributed:
            for step, start in enumerate(range(0, n_items, batch_size), start=1):
                if min(batch_size, n_items - start) >= 2:
                    whole = slice(start, start + batch_size)
                    yield step, whole, whole
            return
        width = batch_size * self.size
        for step, start in enumerate(range(0, n_items - width + 1, width), start=1):
            mine = start + self.rank * batch_size
            yield step, slice(mine, mine + batch_size), slice(start, start + width)

    def own_order(self, order: torch.Tensor, batch_size: int) -> torch.Tensor:
        """This rank's positions of the epoch in the order its steps take them (what a loader
        reads ahead)."""
        if not self.distributed:
            return order
        parts = [order[mine] for _, mine, _ in self.steps(len(order), batch_size)]
        return torch.cat(parts) if parts else order[:0]


ONE_PROCESS = World()  # the plain loop's world


def world_record() -> dict[str, int]:
    """What a checkpoint made by several processes records of them: their number, which sets
    the global batch, so that a job restarted at another size does not continue it. Empty for
    one process, so that the plain loop's checkpoints and records stay as they were."""
    world = World.from_env()
    return {"world_size": world.size} if world.distributed else {}


def join(world: World, device: torch.device) -> torch.device:
    """Join the fit's process group (NCCL between GPUs, Gloo between CPUs) once; this rank's
    device (its local GPU under torchrun's one-process-per-GPU launch)."""
    import torch.distributed as dist

    if device.type == "cuda":
        device = torch.device("cuda", world.local_rank)
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return device


def check_settings(config) -> None:
    """The settings a data-parallel fit cannot honour, refused by name."""
    refused = {
        "memory_bank": "the bank holds one process's past outputs",
        "cuda_graph": "a CUDA graph cannot hold the ranks' collectives here",
    }
    for key, why in refused.items():
        if getattr(config, key, False):
            raise ValueError(f"train.{key}: not with several processes ({why})")


def parallel(model: nn.Module, device: torch.device) -> nn.Module:
    """The module the steps call: DistributedDataParallel over the model (whose parameters
    checkpoints and encoding keep using)."""
    from torch.nn.parallel import DistributedDataParallel

    device_ids = [device.index] if device.type == "cuda" else None
    return DistributedDataParallel(model, device_ids=device_ids)


def synced_batch_norm(model: nn.Module, device: torch.device) -> nn.Module:
    """Batch norm over the global batch: PyTorch's SyncBatchNorm on GPUs; on CPUs, which it
    does not serve, the same statistics through an all-reduce of the ranks' sums
    (GlobalStatistics), so that a CPU fit too is the one-process fit of the global batch."""
    if device.type == "cuda":
        return nn.SyncBatchNorm.convert_sync_batchnorm(model)
    for module in model.modules():
        for plain, synced in _GLOBAL.items():
            if type(module) is plain:
                # A class swap keeps the parameters, buffers and mode the module has.
                module.__class__ = synced
    return model


class GlobalStatistics:
    """A training batch norm whose mean and variance are those of every rank's batch together:
    each rank's per-channel sums, sums of squares and counts are added by an all-reduce that
    carries gradients, as SyncBatchNorm does between GPUs. In evaluation, and with frozen
    statistics (train.freeze_bn), it is the plain batch norm."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return super().forward(x)
        from torch.distributed.nn.functional import all_reduce

        c = x.shape[1]
        dims = [d for d in range(x.dim()) if d != 1]
        count = torch.full((1,), x.numel() // c, dtype=x.dtype, device=x.device)
        sums = all_reduce(torch.cat([x.sum(dims), (x * x).sum(dims), count]))
        n = sums[-1]
        mean = sums[:c] / n
        var = sums[c : 2 * c] / n - mean * mean
        self._track(mean.detach(), var.detach() * n / (n - 1))
        shape = [1, c] + [1] * (x.dim() - 2)
        y = (x - mean.view(shape)) * torch.rsqrt(var.view(shape) + self.eps)
        if self.affine:
            y = y * self.weight.view(shape) + self.bias.view(shape)
        return y

    @torch.no_grad()
    def _track(self, mean: torch.Tensor, unbiased_var: torch.Tensor) -> None:
        """The running statistics, updated as nn.BatchNorm updates them."""
        if not self.track_running_stats:
            return
        self.num_batches_tracked += 1
        factor = self.momentum
        if factor is None:  # a cumulative average
            factor = 1.0 / float(self.num_batches_tracked)
        self.running_mean.lerp_(mean, factor)
        self.running_var.lerp_(unbiased_var, factor)


class _GlobalBatchNorm1d(GlobalStatistics, nn.BatchNorm1d):
    pass


class _GlobalBatchNorm2d(GlobalStatistics, nn.BatchNorm2d):
    pass


class _GlobalBatchNorm3d(GlobalStatistics, nn.BatchNorm3d):
    pass


_GLOBAL = {
    nn.BatchNorm1d: _GlobalBatchNorm1d,
    nn.BatchNorm2d: _GlobalBatchNorm2d,
    nn.BatchNorm3d: _GlobalBatchNorm3d,
}


def gathered(z: torch.Tensor) -> torch.Tensor:
    """The codes of the whole global batch, rank by rank, with their gradients."""
    from torch.distributed.nn.functional import all_gather

    return torch.cat(all_gather(z))


def seed_epoch(seed: int, epoch: int, world: World) -> None:
    """Each rank's dropout stream for the epoch, from (seed, epoch, rank): a job restarted at an
    epoch draws what the uninterrupted one drew (a checkpoint holds one rank's state only)."""
    state = np.random.SeedSequence([seed, epoch, 2, world.rank]).generate_state(1)
    torch.manual_seed(int(state[0]))


def barrier(world: World) -> None:
    if world.distributed:
        import torch.distributed as dist

        dist.barrier()
