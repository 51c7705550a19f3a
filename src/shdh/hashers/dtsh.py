"""DTSH: Deep Supervised Hashing with Triplet Labels (Wang, Shi & Kitani, ACCV 2016,
arXiv 1612.03900).

The negative log-likelihood of triplet labels (anchor a, positive p, negative n: s_ap = 1 and
s_an = 0) under p(a is nearer p than n) = sigmoid(theta_ap - theta_an - alpha), with
theta_ij = <u_i, u_j> / 2 on the outputs u of the linear head, relaxed from the codes b = sgn(u)
by a quantisation term:

    L = sum_{(a, p, n)} -log sigmoid(theta_ap - theta_an - alpha)
        + lambda sum_i ||b_i - u_i||^2,     b_i = sgn(u_i) (sgn(0) = -1, a constant)

For +-1 codes theta_ij = L/2 - d_H(i, j), so the margin alpha asks for d_H(a, n) - d_H(a, p) >
alpha. Defaults are the authors' code's (Minione/DTSH): alpha = L/2 and lambda (their eta) = 100;
DeepHash-pytorch's and FIRe's alpha = 5 without the 1/2 mean very different things at 12 and 64
bits (docs/method.md).

Triplets are all those of the batch: every item an anchor, every other item with its finest label
a positive, every item without one a negative. The anchor itself is never its own positive
(DeepHash-pytorch's similarity row includes the diagonal, which inflates norms and lets anchors
without a true positive contribute). Gradients reach all three members. s = same finest label
(multi-label items: finest node sets intersect).
"""

from typing import ClassVar

import torch

from shdh.core.batch_pairs import (
    batch_ancestors,
    finest_nodes,
    partner_mask,
    same_finest,
)
from shdh.hashers.deep import DeepHasher
from shdh.hashers.method_settings import REDUCTIONS, DTSHSettings
from shdh.training.objective import Bank, Objective, Task


class DTSHObjective(Objective):
    """DTSH's triplet likelihood and quantisation (dtsh_loss); alpha = L/2 by default."""

    name: ClassVar[str] = "dtsh"

    def __init__(self, settings: DTSHSettings, task: Task) -> None:
        super().__init__(settings, task)
        margin = settings.margin if settings.margin is not None else task.n_bits / 2.0
        self.terms = {
            "margin": float(margin),
            "lam": float(settings.lam),
            "reduction": settings.reduction,
        }

    def forward(
        self, z: torch.Tensor, anc: torch.Tensor, bank: Bank = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return dtsh_loss(z, anc, **self.terms)


class DTSH(DeepHasher):
    """Deep Supervised Hashing with Triplet labels: one segment, plain Hamming."""

    supervision: ClassVar[str | None] = "label"
    objective = DTSHObjective


def dtsh_loss(
    z: torch.Tensor,
    anc: torch.Tensor,
    *,
    margin: float,
    lam: float = 100.0,
    reduction: str = "sum",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """DTSH's loss for one batch: z (B, L) outputs u, anc (B, K) ancestor ids or (B, K, M)
    ancestor sets.

    Both terms keep the paper's balance (sums over all triplets and all items) and are scaled
    by one number: "sum" divides by B (each anchor's triplets summed, the authors' code's
    per-anchor balance), "mean" by the number of triplets (at least 1: a batch without any
    triplet keeps its quantisation term alone). Returns the loss and detached {"e1": the triplet
    term, "e2": lambda times the quantisation term}.
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"dtsh_loss: reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if not margin >= 0 or not lam >= 0:
        raise ValueError(f"dtsh_loss: needs margin >= 0 and lam >= 0, got {margin}, {lam}")
    anc = batch_ancestors(z, anc, "dtsh_loss")
    u = z.to(torch.promote_types(z.dtype, torch.float32))  # (B, L); bf16 autocast -> float32
    n_batch = u.shape[0]
    others, _ = partner_mask(n_batch, n_batch, z.device)  # (B, B) j != i
    leaf = finest_nodes(anc, "anc", check=False)  # checked once over the training items
    same = same_finest(leaf, leaf)  # (B, B)
    positive, negative = same & others, ~same  # no self-positives

    theta = u @ u.T / 2.0  # (B, B) theta_ij = <u_i, u_j> / 2
    gap = theta[:, :, None] - theta[:, None, :] - margin  # (B, B, B): theta_ap - theta_an - alpha
    triplet = positive[:, :, None] & negative[:, None, :]  # (B, B, B) valid (a, p, n)
    nll = torch.nn.functional.softplus(-gap)  # -log sigmoid(gap), stable
    likelihood = torch.where(triplet, nll, 0.0).sum()
    n_triplets = (positive.sum(1) * negative.sum(1)).sum()  # on the device: no host sync
    b = torch.where(u > 0, 1.0, -1.0).to(u.dtype)  # b_i = sgn(u_i), sgn(0) = -1, no gradient
    quantisation = lam * (b - u).pow(2).sum()
    norm = n_batch if reduction == "sum" else n_triplets.clamp_min(1).to(u.dtype)
    e1, e2 = likelihood / norm, quantisation / norm
    return e1 + e2, {"e1": e1.detach(), "e2": e2.detach()}
