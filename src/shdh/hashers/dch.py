"""DCH: Deep Cauchy Hashing (Cao, Long, Liu & Wang, "Deep Cauchy Hashing for Hamming Space
Retrieval", CVPR 2018).

A pairwise cross-entropy under a Cauchy kernel of a Hamming-distance proxy, so that similar items
fall within a small Hamming radius. The equation numbers are the paper's as the DeepHash-pytorch
implementation cites them (the paper's own text was not at hand here):

    d_ij = (L/2) (1 - cos(u_i, u_j))                                   (Eq. 6)
    p(s_ij = 1) = gamma / (gamma + d_ij)                                (the Cauchy kernel)
    L_C = (1/|S|) sum_ij w_ij [s_ij log(d_ij / gamma) + log(1 + gamma / d_ij)]       (Eq. 8)
        = mean_{S1} log(1 + d_ij / gamma) + mean_{S0} log(1 + gamma / d_ij),
          w_ij = |S|/|S1| or |S|/|S0| as HashNet's                      (Eq. 2)
    L_Q = mean_i log(1 + d(|u_i|, 1) / gamma)                           (Eq. 9)
    L = L_C + lambda L_Q                                                (Eq. 7)

with gamma = 20 and lambda = 0.1 (DeepHash-pytorch's; the research brief's "paper form"). The
distance depends on directions only, so the head stays linear. cos is clamped at 0.99 (d >=
0.005 L), as DeepHash-pytorch does: the dissimilar term grows without bound as d -> 0. s_ij = same
finest label (multi-label items: finest node sets intersect, the paper's "share a label").
"""

import math
from typing import ClassVar

import torch
import torch.nn.functional as F

from shdh.core.batch_pairs import (
    balanced_pair_mean,
    batch_ancestors,
    finest_nodes,
    partner_mask,
    same_finest,
)
from shdh.hashers.deep import DeepHasher
from shdh.hashers.method_settings import REDUCTIONS, DCHSettings
from shdh.training.objective import Bank, Objective, Task

COS_MAX = 0.99  # d_ij >= 0.005 L: log(1 + gamma / d) stays finite for identical directions


class DCHObjective(Objective):
    """DCH's Cauchy cross-entropy and quantisation (dch_loss) with its settings."""

    name: ClassVar[str] = "dch"

    def __init__(self, settings: DCHSettings, task: Task) -> None:
        super().__init__(settings, task)
        self.terms = {
            "gamma": float(settings.gamma),
            "lam": float(settings.lam),
            "reduction": settings.reduction,
        }

    def forward(
        self, z: torch.Tensor, anc: torch.Tensor, bank: Bank = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return dch_loss(z, anc, **self.terms)


class DCH(DeepHasher):
    """Deep Cauchy Hashing: one segment, plain Hamming; s_ij = same finest label."""

    supervision: ClassVar[str | None] = "label"
    objective = DCHObjective


def dch_loss(
    z: torch.Tensor,
    anc: torch.Tensor,
    *,
    gamma: float = 20.0,
    lam: float = 0.1,
    reduction: str = "sum",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """DCH's loss for one batch: z (B, L) outputs u, anc (B, K) ancestor ids or (B, K, M)
    ancestor sets; pairs are the ordered pairs i != j of the batch.

    "mean" is the paper's L_C + lambda L_Q (Eq. 7: weighted mean over the pairs, mean over the
    items); "sum" sums over each anchor's partners, (B - 1) times "mean" for both terms, so that
    lambda keeps its balance. Returns the loss and detached {"e1": L_C, "e2": lambda L_Q}.
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"dch_loss: reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if not gamma > 0 or not lam >= 0:
        raise ValueError(f"dch_loss: needs gamma > 0 and lam >= 0, got {gamma}, {lam}")
    anc = batch_ancestors(z, anc, "dch_loss")
    u = z.to(torch.promote_types(z.dtype, torch.float32))  # (B, L); bf16 autocast -> float32
    n_batch, n_bits = u.shape
    pair_mask, n_pairs = partner_mask(n_batch, n_batch, z.device)
    leaf = finest_nodes(anc, "anc", check=False)  # checked once over the training items
    similar = same_finest(leaf, leaf)  # (B, B) s_ij

    unit = F.normalize(u, dim=1)  # (B, L) u_i / ||u_i||
    cos = (unit @ unit.T).clamp(max=COS_MAX)  # (B, B)
    d = n_bits / 2.0 * (1.0 - cos)  # Eq. 6
    pair = torch.where(similar, torch.log1p(d / gamma), torch.log1p(gamma / d))  # Eq. 8, per pair
    cauchy = balanced_pair_mean(pair, similar & pair_mask, ~similar & pair_mask)  # Eq. 2 weights
    # cos(|u_i|, 1) = ||u_i||_1 / (sqrt(L) ||u_i||_2)
    cos_ones = u.abs().sum(1) / (math.sqrt(n_bits) * u.norm(dim=1).clamp_min(1e-12))  # (B,)
    d_quant = n_bits / 2.0 * (1.0 - cos_ones)  # d(|u_i|, 1)
    quantisation = torch.log1p(d_quant / gamma).mean()  # Eq. 9
    scale = 1.0 if reduction == "mean" else n_pairs / n_batch
    e1, e2 = cauchy * scale, lam * quantisation * scale
    return e1 + e2, {"e1": e1.detach(), "e2": e2.detach()}
