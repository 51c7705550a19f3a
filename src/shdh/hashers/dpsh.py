"""DPSH: Deep Pairwise-Supervised Hashing (Li, Wang & Kang, "Feature Learning based Deep Supervised
Hashing with Pairwise Labels", IJCAI 2016), the paper's deep baseline, and DPSH+H, the same
likelihood with the paper's hierarchical similarity (Eq. 1-3) in place of the 0/1 label.

On the same backbone, loop, optimiser, pairs and defaults as SHDH, so that the two differ in their
loss only: one code segment, plain Hamming ranking, s_ij = same finest label. DPSH+H separates
what the hierarchical similarity brings (DPSH+H over DPSH) from what SHDH's weighted segments
bring (SHDH over DPSH+H), as the paper's KSH+H and COSDISH+H do for the shallow methods.

memory_bank=True pairs every batch with the other training items' past outputs, as the original
code does. It is off by default because, trained from scratch here, it does not train: summed over
~10,000 stale partners the likelihood outweighs eta = 10 by 15-20 times and, since untrained
outputs share a large common component, drives every output to the theta = 0 saddle
(Fashion-MNIST, 64 bits, 10,000 items, 3 epochs: NDCG@100 0.28 = random codes at lr 0.01, 0.48 at
its best lr 1e-4, below the untrained network's 0.54). With the in-batch pairs SHDH uses, DPSH
trains at the shared defaults.
"""

from collections.abc import Sequence
from typing import ClassVar

import torch

from shdh.core.batch_pairs import (
    bank_partners,
    finest_nodes,
    level_weighted_gain,
    partner_mask,
    same_finest,
)
from shdh.core.similarity import check_ancestor_shape
from shdh.hashers.deep import DeepHasher
from shdh.hashers.method_settings import REDUCTIONS, DPSHSettings
from shdh.training.objective import Bank, Objective, Task


class DPSHObjective(Objective):
    """DPSH's likelihood and quantisation term (dpsh_loss) with its settings."""

    name: ClassVar[str] = "dpsh"
    hierarchical: ClassVar[bool] = False  # DPSH+H: s_ij from the tree's levels (Eq. 1-3)

    def __init__(self, settings: DPSHSettings, task: Task) -> None:
        super().__init__(settings, task)
        weights = task.layer_weights if self.hierarchical else None
        # Labels are checked once by the hasher (check_labelled), not per step: a host sync.
        self.terms = {
            "eta": float(settings.eta),
            "reduction": settings.reduction,
            "check_labels": False,
            "layer_weights": weights,
        }

    def forward(
        self, z: torch.Tensor, anc: torch.Tensor, bank: Bank = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        bank_z, bank_anc = bank if bank is not None else (None, None)
        return dpsh_loss(z, anc, bank_z=bank_z, bank_anc=bank_anc, **self.terms)


class DPSHHObjective(DPSHObjective):
    name: ClassVar[str] = "dpsh+h"
    hierarchical: ClassVar[bool] = True


class DPSH(DeepHasher):
    """Deep Pairwise-Supervised Hashing: one segment, plain Hamming; s_ij = same finest label."""

    supervision: ClassVar[str | None] = "label"
    objective = DPSHObjective


class DPSHH(DeepHasher):
    """DPSH+H: DPSH's likelihood against the level-weighted similarity of Eq. 1-3."""

    supervision: ClassVar[str | None] = "hierarchical"
    objective = DPSHHObjective


def _check_dpsh_inputs(
    z: torch.Tensor, anc: torch.Tensor, eta: float, reduction: str
) -> torch.Tensor:
    """dpsh_loss's settings and shapes checked; anc as a tensor on z's device."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"dpsh_loss: reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if not eta >= 0:
        raise ValueError(f"dpsh_loss: eta must be >= 0, got {eta}")
    if z.ndim != 2 or z.shape[0] < 1:
        raise ValueError(f"dpsh_loss: z must be (B, L) with B >= 1, got {tuple(z.shape)}")
    anc = torch.as_tensor(anc, device=z.device)
    check_ancestor_shape(anc.shape, "dpsh_loss: anc", rows=z.shape[0], rows_of="z has")
    return anc


def dpsh_loss(
    z: torch.Tensor,
    anc: torch.Tensor,
    *,
    eta: float = 10.0,
    reduction: str = "sum",
    bank_z: torch.Tensor | None = None,
    bank_anc: torch.Tensor | None = None,
    check_labels: bool = True,
    layer_weights: Sequence[float] | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """DPSH's relaxed objective for one batch: z (B, L) real outputs u, anc (B, K) ancestor ids
    or (B, K, M) ancestor sets (bank_anc: the same layout and M).

    With u = z (no tanh: DPSH's last layer is linear), theta_ij = <u_i, u_j> / 2 and
    s_ij = 1 iff i and j share their finest label (else 0), DPSH minimises

        J = - sum_{ij} (s_ij theta_ij - log(1 + e^theta_ij))  +  eta sum_i ||b_i - u_i||^2,

    the negative log-likelihood of the pair labels under p(s_ij = 1) = sigmoid(theta_ij) plus a
    quantisation term pulling u_i towards b_i = sgn(u_i) (sgn(0) = -1; b is a constant). Pairs
    are the same as shdh_loss's: anchors i in the batch, partners j over the other batch items
    (live on both sides) and the optional memory bank of detached past outputs, as in the
    authors' jiangqy/DPSH-pytorch, which pairs each batch with a bank U of all training outputs.
    The self-pair is left out (the original keeps its stale bank copy; it only pushes ||u_i||).

    Normalisation (docs/method.md: eta must match it): the original divides both sums by
    N * batch, so eta weighs the quantisation of one item against its likelihood summed over all
    N partners. Both reductions keep exactly that balance and differ only by an overall factor:
      "sum"  (default): (sum of pair terms + eta sum_i q_i) / B       (mean over anchors)
      "mean":           (sum of pair terms + eta sum_i q_i) / n_pairs (the original's scale)
    A mean over pairs for the likelihood alone with eta sum_i q_i / B would weigh the
    quantisation about n_partners times more than DPSH does: that is what drowned it.
    check_labels=False skips the per-batch check that every row has a node (a host sync), for
    a caller that ran `check_labelled` on all its rows once.
    layer_weights (u_k, Eq. 2), given: DPSH+H, whose s_ij is the level-weighted similarity's gain
    g_ij = sum_k u_k s^k_ij in [0, 1] (Eq. 1-3) instead of the 0/1 finest label. The likelihood
    term is then the cross-entropy of sigmoid(theta_ij) against g_ij, so items related higher up
    in the tree are pulled part of the way, and unrelated ones pushed apart as before.
    Returns the scalar loss and detached {"e1": likelihood term, "e2": eta * quantisation term}.
    """
    anc = _check_dpsh_inputs(z, anc, eta, reduction)
    dtype = torch.promote_types(z.dtype, torch.float32)  # bf16 autocast outputs -> float32
    u = z.to(dtype)  # (B, L)
    n_batch = u.shape[0]
    bank = bank_partners(u, anc, bank_z, bank_anc, "dpsh_loss")
    u_p, anc_p = u, anc  # partners: the batch ...
    if bank is not None:
        u_p = torch.cat([u, bank[0].detach().to(dtype)])  # (B+M, L) ... and the bank
        anc_p = torch.cat([anc, bank[1]])
    pair_mask, n_pairs = partner_mask(n_batch, u_p.shape[0], z.device)
    if n_pairs == 0:
        raise ValueError("dpsh_loss: needs >= 2 batch items or a memory bank (no pairs)")

    theta = u @ u_p.T / 2.0  # (B, B+M): theta_ij = <u_i, u_j> / 2
    if layer_weights is None:  # s_ij in {0, 1}: the same finest label
        leaf = finest_nodes(anc, "anc", check_labels)  # (B,) leaves or (B, M) deepest sets
        leaf_p = (
            leaf
            if bank is None
            else torch.cat([leaf, finest_nodes(bank[1], "bank_anc", check_labels)])
        )
        s = same_finest(leaf, leaf_p).to(dtype)  # (B, B+M)
    else:  # DPSH+H: s_ij = g_ij in [0, 1] (Eq. 1-3)
        s = level_weighted_gain(anc, anc_p, layer_weights).to(dtype)
    nll = torch.nn.functional.softplus(theta) - s * theta  # log(1 + e^theta) - s theta, stable
    likelihood = torch.where(pair_mask, nll, 0.0).sum()
    b = torch.where(u > 0, 1.0, -1.0).to(dtype)  # b_i = sgn(u_i), sgn(0) = -1, no gradient
    quantisation = (b - u).pow(2).sum()  # sum_i ||b_i - u_i||^2
    norm = n_batch if reduction == "sum" else n_pairs
    e1 = likelihood / norm
    e2 = eta * quantisation / norm
    return e1 + e2, {"e1": e1.detach(), "e2": e2.detach()}
