"""GreedyHash (Su, Zhang, Han & Tian, "Greedy Hash: Towards Fast Optimization for Accurate Hash
Coding in CNN", NeurIPS 2018; the authors' code ssppp/GreedyHash).

The hashing layer's output h is binarised in the forward pass itself, b = sgn(h), and the
backward pass hands the gradient through unchanged, dL/dh := dL/db (the paper's "greedy" step:
the network moves towards the nearest discrete solution; no |h| <= 1 clipping, unlike the usual
straight-through estimator). A bias-free classifier W (bits x classes) on b and a cubic
penalty that keeps h near the vertices, where the identity backward is a good approximation:

    L = CE(W^T sgn(h), y) + alpha * mean_{i,k} | |h_ik| - 1 |^3

(the paper's text was not at hand here: the terms are named after the authors' code, not
numbered). W is a parameter of the objective, initialised from the fit's own seeded stream,
trained with the network at the head's learning rate and kept in every checkpoint. The codes are
sgn(h), the very values the classifier saw in training (sgn(0) = -1, as the codes file's).

Multi-label data is refused: the paper defines no multi-label form (cisip-FIRe's sigmoid
cross-entropy on several labels is its own extension).
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from shdh.hashers.class_table import class_lookup, class_rows, finest_classes, refuse_multi_label
from shdh.hashers.deep import DeepHasher
from shdh.hashers.method_settings import REDUCTIONS, GreedyHashSettings
from shdh.training.objective import Bank, Objective, Task

CLASSIFIER_SALT = 1  # task.generator's stream for W's initial values


class GreedySign(torch.autograd.Function):
    """sgn(h) forward (sgn(0) = -1), the identity backward: dL/dh = dL/db."""

    @staticmethod
    def forward(ctx, h: torch.Tensor) -> torch.Tensor:
        return torch.where(h > 0, 1.0, -1.0).to(h.dtype)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad


def greedyhash_loss(
    h: torch.Tensor,
    target: torch.Tensor,
    weight: torch.Tensor,
    *,
    alpha: float = 0.1,
    reduction: str = "mean",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """GreedyHash's L for one batch: h (B, L) the hashing layer's outputs, target (B,) class rows,
    weight (L, C) the classifier W. Per item, CE(W^T sgn(h_i), y_i) + alpha mean_k ||h_ik| - 1|^3;
    "mean" averages the items (the paper's), "sum" sums them (both terms alike, so alpha keeps
    its meaning). Returns the loss and detached {"e1": the cross-entropy, "e2": alpha x the
    penalty, "accuracy": the classifier's on sgn(h)}."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"greedyhash_loss: reduction must be one of {REDUCTIONS}")
    b = GreedySign.apply(h)  # (B, L) in {-1, +1}, gradient straight through
    logits = b @ weight  # (B, C) = W^T b
    ce = F.cross_entropy(logits, target, reduction="none")  # (B,)
    penalty = (h.abs() - 1.0).abs().pow(3).mean(dim=1)  # (B,) mean_k ||h_ik| - 1|^3
    reduce = torch.mean if reduction == "mean" else torch.sum
    e1, e2 = reduce(ce), alpha * reduce(penalty)
    accuracy = (logits.argmax(dim=1) == target).float().mean()
    return e1 + e2, {"e1": e1.detach(), "e2": e2.detach(), "accuracy": accuracy.detach()}


class GreedyHashObjective(Objective):
    """GreedyHash's loss with its classifier W (bits x finest classes), a parameter."""

    name: ClassVar[str] = "greedyhash"

    def __init__(self, settings: GreedyHashSettings, task: Task) -> None:
        super().__init__(settings, task)
        classes = finest_classes(task.ancestors)
        self.register_buffer("lookup", class_lookup(classes), persistent=False)
        bound = 1.0 / task.n_bits**0.5  # nn.Linear's default range, drawn from the fit's stream
        init = torch.rand(task.n_bits, len(classes), generator=task.generator(CLASSIFIER_SALT))
        self.weight = nn.Parameter((2.0 * init - 1.0) * bound)  # (L, C)

    def forward(
        self, z: torch.Tensor, anc: torch.Tensor, bank: Bank = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        target = class_rows(self.lookup, anc)  # (B,)
        return greedyhash_loss(
            z, target, self.weight, alpha=self.settings.alpha, reduction=self.settings.reduction
        )


class GreedyHash(DeepHasher):
    """GreedyHash: one segment, plain Hamming; trained as a classifier of its own codes."""

    supervision: ClassVar[str | None] = "label"
    objective = GreedyHashObjective

    def _prepare(self, anc: np.ndarray) -> None:
        refuse_multi_label(self.name, anc, "GreedyHash's paper classifies one label per item")
