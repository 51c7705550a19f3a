"""DSH: Deep Supervised Hashing (Liu, Wang, Shan & Chen, "Deep Supervised Hashing for Fast Image
Retrieval", CVPR 2016).

A contrastive loss on the real outputs u of the linear hashing head (no tanh), with an L1 pull of
every coordinate towards +-1, over all the pairs of the batch (the paper makes its pairs online
from the images of a mini-batch). With D_ij = ||u_i - u_j||^2 and s_ij = 1 when i and j share
their finest label (multi-label items: their finest node sets intersect), else 0, the paper's
relaxed loss of one pair (its L_r, the binary-code contrastive loss with sgn relaxed away) is

    L_r(i, j) = 1/2 s_ij D_ij + 1/2 (1 - s_ij) max(0, m - D_ij)
                + alpha (|| |u_i| - 1 ||_1 + || |u_j| - 1 ||_1)

summed over the pairs, with m = 2L for L bits (for +-1 codes D = 4 d_H: a Hamming margin of L/2)
and alpha = 0.01, the paper's. The regulariser is the paper's, one term per member of each pair
(weixu000/DSH-pytorch's `* 2`); DeepHash-pytorch's 0.1 on the element mean is another scale.
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
from shdh.hashers.method_settings import REDUCTIONS, DSHSettings
from shdh.training.objective import Bank, Objective, Task


class DSHObjective(Objective):
    """DSH's contrastive loss and regulariser (dsh_loss) with its settings; m = 2L by default."""

    name: ClassVar[str] = "dsh"

    def __init__(self, settings: DSHSettings, task: Task) -> None:
        super().__init__(settings, task)
        margin = settings.margin if settings.margin is not None else 2.0 * task.n_bits
        self.terms = {
            "margin": float(margin),
            "alpha": float(settings.alpha),
            "reduction": settings.reduction,
        }

    def forward(
        self, z: torch.Tensor, anc: torch.Tensor, bank: Bank = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return dsh_loss(z, anc, **self.terms)


class DSH(DeepHasher):
    """Deep Supervised Hashing: one segment, plain Hamming; s_ij = same finest label."""

    supervision: ClassVar[str | None] = "label"
    objective = DSHObjective


def dsh_loss(
    z: torch.Tensor,
    anc: torch.Tensor,
    *,
    margin: float,
    alpha: float = 0.01,
    reduction: str = "sum",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """DSH's loss for one batch: z (B, L) real outputs u, anc (B, K) ancestor ids or (B, K, M)
    ancestor sets; pairs are the ordered pairs i != j of the batch.

    reduction "mean" is the paper's sum over pairs divided by their number:
        e1 = mean_{i != j} [1/2 s_ij D_ij + 1/2 (1 - s_ij) max(0, m - D_ij)]
        e2 = mean_{i != j} alpha (R_i + R_j) = 2 alpha mean_i R_i,   R_i = sum_k ||u_ik| - 1|
    and "sum" sums over each anchor's partners (B - 1 times "mean", both terms: alpha keeps the
    paper's balance). Returns the loss and detached {"e1": contrastive, "e2": regulariser}.
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"dsh_loss: reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if not margin > 0 or not alpha >= 0:
        raise ValueError(f"dsh_loss: needs margin > 0 and alpha >= 0, got {margin}, {alpha}")
    anc = batch_ancestors(z, anc, "dsh_loss")
    u = z.to(torch.promote_types(z.dtype, torch.float32))  # (B, L); bf16 autocast -> float32
    n_batch = u.shape[0]
    pair_mask, n_pairs = partner_mask(n_batch, n_batch, z.device)
    leaf = finest_nodes(anc, "anc", check=False)  # checked once over the training items
    s = same_finest(leaf, leaf).to(u.dtype)  # (B, B) s_ij in {0, 1}

    sq = u.pow(2).sum(1)  # (B,)
    dist = (sq[:, None] + sq[None, :] - 2.0 * u @ u.T).clamp_min(0.0)  # (B, B) D_ij
    pair = 0.5 * s * dist + 0.5 * (1.0 - s) * torch.relu(margin - dist)  # contrastive term
    contrastive = torch.where(pair_mask, pair, 0.0).sum()
    pull = (u.abs() - 1.0).abs().sum(1)  # (B,) R_i = || |u_i| - 1 ||_1
    # sum over ordered pairs i != j of alpha (R_i + R_j): each item is in 2 (B - 1) of them
    regulariser = alpha * 2.0 * (n_batch - 1) * pull.sum()
    norm = n_batch if reduction == "sum" else n_pairs
    e1, e2 = contrastive / norm, regulariser / norm
    return e1 + e2, {"e1": e1.detach(), "e2": e2.detach()}
