"""What the training loop asks of a deep method: its objective, a torch module that turns a batch's
outputs into the loss, and what it is told of the task it trains for.

The loop knows no method. Every deep method (shdh.hashers.shdh, .dpsh, .dsh, ...) is one
`Objective` subclass made from its settings and a `Task`; the loop calls it on each batch, tells it
where an epoch starts and ends, trains the parameters it has with the network's (GreedyHash's
classifier), and keeps its state (parameters and buffers: hash centres, HPDH's class means,
HashNet's continuation) in every checkpoint, so that a resumed fit goes on from the same state.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch
from torch import nn

Bank = tuple[torch.Tensor, torch.Tensor] | None  # detached past outputs and their ancestors


@dataclass(frozen=True)
class Task:
    """What an objective is made for: the code's layout, the tree's level weights u_k (Eq. 2), the
    training items' ancestors and the fit's seed.

    ancestors: (N, K) node ids of the training items' ancestors, level 1 (the root) first, or
    (N, K, M) ancestor sets of multi-label items, -1 padded. Node ids are the tree's, unique
    across levels, so the methods that need classes (CSQ's centres, GreedyHash's classifier,
    HPDH's per-level centres) take them from here: the label tree the pipeline built."""

    segment_sizes: tuple[int, ...]
    segment_levels: tuple[int, ...]
    layer_weights: tuple[float, ...]
    ancestors: np.ndarray
    seed: int = 0

    @property
    def n_bits(self) -> int:
        return int(sum(self.segment_sizes))

    @property
    def height(self) -> int:
        """K, the number of tree levels, the root included."""
        return len(self.layer_weights)

    @property
    def multi_label(self) -> bool:
        return self.ancestors.ndim == 3

    def classes(self, level: int | None = None) -> np.ndarray:
        """The sorted node ids present at a 1-based level (default: the finest, K) among the
        training items: the classes a classifier or a centre table has one row for."""
        column = self.ancestors[:, (level or self.height) - 1]
        nodes = np.unique(column)
        return nodes[nodes >= 0]

    def generator(self, *salt: int) -> torch.Generator:
        """A torch generator of the fit's own stream for `salt` (one per use: centres, a
        classifier's initial weights), apart from the global one that initialises the network:
        an objective's random state depends on the seed alone, wherever it is made."""
        state = np.random.SeedSequence([self.seed, 7919, *salt]).generate_state(2, np.uint32)
        return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


class Objective(nn.Module):
    """A deep method's training objective: `forward(z, anc, bank) -> (loss, parts)`.

    z: (B, L) float32 outputs of the hashing head for the batch; anc: (B, K) ancestor ids or
    (B, K, M) ancestor sets, on z's device; bank: None, or (bank_z (M, L), bank_anc) detached past
    outputs of other training items when `memory_bank` is on. `parts`: detached scalars the loop
    logs per epoch (e1, e2, accuracy, ...).

    A subclass takes (settings, task) and may have parameters (trained with the network, clipped
    with it) and buffers; both are kept in checkpoints. `record` is what a checkpoint compares
    before it resumes: the method's name and settings.
    """

    name: ClassVar[str] = ""  # the method, as the catalogue names it
    # The hashing head's output goes through BatchNorm before the loss and the sign (OrthoHash's
    # v = BN(W x)); the saved network has the layer, so encoding applies it too.
    head_norm: ClassVar[bool] = False

    def __init__(self, settings: Any, task: Task) -> None:
        super().__init__()
        self.settings, self.task = settings, task

    @property
    def record(self) -> dict[str, Any]:
        return {"loss": self.name, **dataclasses.asdict(self.settings)}

    def start_epoch(self, epoch: int) -> None:
        """Before the first step of `epoch` (1-based): a schedule of the loss (HashNet's beta)."""

    def end_epoch(self) -> None:
        """After the last step of an epoch: state made from the whole epoch (HPDH's centres)."""

    def forward(
        self, z: torch.Tensor, anc: torch.Tensor, bank: Bank = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        raise NotImplementedError


def one_segment(n_bits: int, height: int) -> tuple[list[int], list[int]]:
    """The layout of a method whose code is one segment (every method but SHDH): all n_bits,
    standing for the finest level."""
    return [int(n_bits)], [int(height)]
