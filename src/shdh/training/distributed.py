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
Batch norm is synchronised across the ranks on GPUs (SyncBatchNorm; PyTorch has no CPU
version); a global batch that is not full is left out, as the ranks must gather codes of one
shape. With one process nothing here runs: a fit is bit for bit the plain loop's.
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
    """Batch norm over the global batch on GPUs; a CPU keeps each rank's own statistics."""
    return nn.SyncBatchNorm.convert_sync_batchnorm(model) if device.type == "cuda" else model


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
