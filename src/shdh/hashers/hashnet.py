"""HashNet: Deep Learning to Hash by Continuation (Cao, Long, Wang & Yu, ICCV 2017,
arXiv 1702.00758), and HashNet+H, its weighted likelihood against the paper's hierarchical
similarity (Eq. 1-3 of SHDH) in place of the 0/1 label, as DPSH+H is DPSH's (hashers/dpsh.py).

HashNet binarises by continuation instead of a quantisation term: the codes are h = tanh(beta u)
of the linear head's outputs u, and beta grows during training, so that tanh(beta u) tends to
sgn(u), the code it encodes with. Its loss is the weighted maximum likelihood of the pair labels
under the adaptive sigmoid p(s_ij = 1) = sigmoid(theta_ij), theta_ij = alpha <h_i, h_j>:

    L = (1/|S|) sum_{ij in S} w_ij [log(1 + e^theta_ij) - s_ij theta_ij],
    w_ij = |S| / |S1| for the similar pairs S1, |S| / |S0| for the dissimilar S0,

which is the mean over S1 plus the mean over S0 (core.batch_pairs.balanced_pair_mean; a batch
without one kind is guarded there). The paper's weight also carries a factor c_ij for graded
multi-label similarity; like every reference, c_ij = 1 here. Pairs are the batch's ordered pairs
i != j; s_ij = same finest label (multi-label items: finest node sets intersect).

Defaults (docs/method.md): alpha = 10/L, the authors' code (thuml/HashNet), which keeps theta in
+-10 at any code length; beta_e = sqrt(1 + beta_growth (e - 1)) at the start of epoch e. The
authors set beta = (1 + 0.005 t)^0.5 every 200 of their 10,000 steps; at their 278 steps per epoch
(10,000 training images, batch 36) that is beta_growth = 1.39 an epoch. DeepHash-pytorch's
sqrt(floor(e/20) + 1) would never leave 1 at the default budget's 3 epochs. beta is a buffer of
the objective, so every checkpoint keeps it and a captured CUDA graph sees it change.

HashNet+H: s_ij = g_ij = sum_k u_k s^k_ij in [0, 1] (core.batch_pairs.level_weighted_gain), the
cross-entropy of sigmoid(theta_ij) against g_ij, with "similar" = g_ij > 0 for the weights (the
research brief's HashNet-H; FIRe's and DeepHash-pytorch's masks are "> 0" too).
"""

import math
from collections.abc import Sequence
from typing import ClassVar

import torch

from shdh.core.batch_pairs import (
    balanced_pair_mean,
    batch_ancestors,
    finest_nodes,
    level_weighted_gain,
    partner_mask,
    same_finest,
)
from shdh.hashers.deep import DeepHasher
from shdh.hashers.method_settings import REDUCTIONS, HashNetSettings
from shdh.training.objective import Bank, Objective, Task


def continuation_beta(epoch: int, growth: float) -> float:
    """beta at the start of a 1-based epoch: sqrt(1 + growth (epoch - 1)), 1 for the first."""
    return math.sqrt(1.0 + growth * (epoch - 1))


class HashNetObjective(Objective):
    """HashNet's weighted likelihood (hashnet_loss) and its continuation schedule."""

    name: ClassVar[str] = "hashnet"
    hierarchical: ClassVar[bool] = False  # HashNet+H: s_ij from the tree's levels (Eq. 1-3)

    def __init__(self, settings: HashNetSettings, task: Task) -> None:
        super().__init__(settings, task)
        alpha = settings.alpha if settings.alpha is not None else 10.0 / task.n_bits
        self.terms = {
            "alpha": float(alpha),
            "reduction": settings.reduction,
            "layer_weights": task.layer_weights if self.hierarchical else None,
        }
        # The continuation's state, in every checkpoint; start_epoch sets it in place.
        self.register_buffer("beta", torch.tensor(1.0))

    def start_epoch(self, epoch: int) -> None:
        self.beta.fill_(continuation_beta(epoch, self.settings.beta_growth))

    def forward(
        self, z: torch.Tensor, anc: torch.Tensor, bank: Bank = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return hashnet_loss(z, anc, beta=self.beta, **self.terms)


class HashNetHObjective(HashNetObjective):
    name: ClassVar[str] = "hashnet+h"
    hierarchical: ClassVar[bool] = True


class HashNet(DeepHasher):
    """HashNet: one segment, plain Hamming; s_ij = same finest label."""

    supervision: ClassVar[str | None] = "label"
    objective = HashNetObjective


class HashNetH(DeepHasher):
    """HashNet+H: HashNet's weighted likelihood against the level-weighted similarity."""

    supervision: ClassVar[str | None] = "hierarchical"
    objective = HashNetHObjective


def hashnet_loss(
    z: torch.Tensor,
    anc: torch.Tensor,
    *,
    alpha: float,
    beta: float | torch.Tensor = 1.0,
    reduction: str = "sum",
    layer_weights: Sequence[float] | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """HashNet's loss for one batch: z (B, L) outputs u of the linear head, anc (B, K) ancestor
    ids or (B, K, M) ancestor sets.

    h = tanh(beta u), theta_ij = alpha <h_i, h_j>, and the weighted likelihood
        e1 = mean_{S1} l_ij + mean_{S0} l_ij,  l_ij = log(1 + e^theta_ij) - s_ij theta_ij
    over the ordered pairs i != j (softplus: stable for any theta). "mean" is the paper's
    (1/|S|) sum w_ij l_ij; "sum" sums over each anchor's partners, (B - 1) times as much.
    layer_weights (u_k, Eq. 2), given: HashNet+H, s_ij = g_ij in [0, 1], similar = g_ij > 0.
    Returns the loss and detached {"e1": the likelihood, "beta": the continuation's beta}.
    """
    if reduction not in REDUCTIONS:
        raise ValueError(f"hashnet_loss: reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if not alpha > 0:
        raise ValueError(f"hashnet_loss: alpha must be > 0, got {alpha}")
    anc = batch_ancestors(z, anc, "hashnet_loss")
    u = z.to(torch.promote_types(z.dtype, torch.float32))  # (B, L); bf16 autocast -> float32
    beta = torch.as_tensor(beta, dtype=u.dtype, device=u.device)
    n_batch = u.shape[0]
    pair_mask, n_pairs = partner_mask(n_batch, n_batch, z.device)
    if layer_weights is None:  # s_ij in {0, 1}: the same finest label
        leaf = finest_nodes(anc, "anc", check=False)  # checked once over the training items
        s = same_finest(leaf, leaf).to(u.dtype)  # (B, B)
    else:  # HashNet+H: s_ij = g_ij in [0, 1] (Eq. 1-3)
        s = level_weighted_gain(anc, anc, layer_weights).to(u.dtype)

    h = torch.tanh(beta * u)  # (B, L) continuation: tanh(beta u) -> sgn(u) as beta grows
    theta = alpha * h @ h.T  # (B, B) adaptive sigmoid's argument
    nll = torch.nn.functional.softplus(theta) - s * theta  # -log p(s_ij | h_i, h_j)
    similar = s > 0
    likelihood = balanced_pair_mean(nll, similar & pair_mask, ~similar & pair_mask)
    e1 = likelihood if reduction == "mean" else likelihood * (n_pairs / n_batch)
    return e1, {"e1": e1.detach(), "beta": beta.detach()}
