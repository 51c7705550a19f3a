"""The training step on one batch: forward (bf16 autocast and channels_last on a GPU), the
method's objective in fp32, backward, gradient clipping and SGD, replayed as one CUDA graph where
asked; the memory bank's partners for the batch.
"""

import itertools
import logging

import numpy as np
import torch
from torch import nn

from shdh.nets.cnnf import to_input
from shdh.nets.hashing import HashingNet
from shdh.nets.views import train_view
from shdh.training import distributed
from shdh.training.cuda_graph_step import GraphedStep
from shdh.training.distributed import ONE_PROCESS, World
from shdh.training.loop_settings import TrainConfig
from shdh.training.state import State

log = logging.getLogger(__name__)


class TrainStep:
    """The training step on one batch: uint8 images (b, H, W[, C]) on the device and their
    positions in the training set (on the device) -> the detached (loss, parts). Every step goes
    through one GraphedStep; its CUDA graph replays the full batches where config.cuda_graph
    asks for it (not with a memory bank, whose partners change in number from step to step) and
    is off otherwise."""

    def __init__(
        self,
        config: TrainConfig,
        device: torch.device,
        state: State,
        anc_train: torch.Tensor,
        world: World = ONE_PROCESS,
    ) -> None:
        self.config, self.device, self.state = config, device, state
        self.anc_train, self.world = anc_train, world
        self.model = step_model(state.model, config.compile, world, device)
        self.graphed = config.cuda_graph and device.type == "cuda" and not config.memory_bank
        self.step = GraphedStep(self._forward_backward, state.optimizer, device, graph=self.graphed)
        self.views = Views(config)

    def start_epoch(self, epoch: int) -> None:
        self.views.start_epoch(epoch)
        self.state.objective.start_epoch(epoch)

    def __call__(
        self,
        images: torch.Tensor,
        pos_t: torch.Tensor,
        *,
        full: bool,
        batch_pos: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """full: whether the batch has batch_size items (only those replay the graph).
        batch_pos: the positions of the whole global batch, whose codes the loss pairs, when
        this process holds part of it (shdh.training.distributed); None: pos_t."""
        images = self.views(images)  # outside the graph: the crops differ from step to step
        inputs = (images, self.anc_train[pos_t if batch_pos is None else batch_pos], pos_t)
        return self.step(*inputs) if full else self.step.eager(*inputs)

    def _forward_backward(
        self, images: torch.Tensor, anc: torch.Tensor, pos_t: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        config, device, state = self.config, self.device, self.state
        x = to_input(images, config.image_size, device)  # (b, C, S, S)
        if device.type == "cuda":
            x = x.contiguous(memory_format=torch.channels_last)
        autocast = torch.autocast(
            device_type=device.type,
            dtype=torch.bfloat16,
            enabled=config.bf16 and device.type == "cuda",
            cache_enabled=not self.graphed,  # a CUDA graph must not keep autocast's weight casts
        )
        with autocast:
            z = self.model(x)  # (b, L)
        if self.world.distributed:
            z = distributed.gathered(z)  # (world x b, L): the global batch, with gradients
        bank = bank_partners(state, self.anc_train, pos_t)
        loss, parts = state.objective(z.float(), anc, bank)  # outside autocast: fp32
        loss.backward()
        if config.grad_clip > 0:
            trained = itertools.chain(state.model.parameters(), state.objective.parameters())
            nn.utils.clip_grad_norm_(trained, config.grad_clip)
        state.optimizer.step()
        if config.memory_bank:
            state.bank_z[pos_t] = z.detach().float()
            state.bank_filled[pos_t] = True
        return loss.detach(), {k: v.detach() for k, v in parts.items()}


def seeded_generator(*key: int) -> torch.Generator:
    """A torch generator of its own stream for `key`: (seed, epoch) is an epoch's order, (seed,
    epoch, 1) its crops and flips, apart from each other and from torch's global generator
    (dropout)."""
    state = np.random.SeedSequence(list(key)).generate_state(2, dtype=np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


def step_model(
    model: HashingNet,
    compile_it: bool,
    world: World = ONE_PROCESS,
    device: torch.device | None = None,
) -> nn.Module:
    """The module the training steps call: the model, or its torch.compile'd form, within
    DistributedDataParallel when several processes train it (the same parameters; checkpoints
    and encoding use the model itself)."""
    if compile_it:
        log.info("compiling the network with torch.compile (the first steps take longer)")
        model = torch.compile(model)
    return distributed.parallel(model, device) if world.distributed else model


class Views:
    """The images a training step shows the network: as they are, or (train.augment) a random
    resized crop and flip of each, drawn from (seed, epoch): a run resumed at an epoch's start
    draws the crops the uninterrupted run drew."""

    def __init__(self, config: TrainConfig) -> None:
        self.config = config
        self.generator: torch.Generator | None = None

    def start_epoch(self, epoch: int) -> None:
        if self.config.augment:
            self.generator = seeded_generator(self.config.seed, epoch, 1)

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        if not self.config.augment:
            return images
        if self.generator is None:
            raise RuntimeError("TrainStep: start_epoch must come before an augmented step")
        return train_view(images, self.config.image_size, self.generator)


def bank_partners(
    state: State, anc_train: torch.Tensor, pos_t: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The memory bank's partners for a batch: the filled entries, the batch's own left out
    (it is already paired with itself). None without a bank."""
    if len(state.bank_z) == 0:
        return None
    use = state.bank_filled.clone()
    use[pos_t] = False
    return state.bank_z[use], anc_train[use]
