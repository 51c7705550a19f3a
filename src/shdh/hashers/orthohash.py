"""OrthoHash (Hoe, Ng, Zhang, Chan, Song & Xiang, "One Loss for All: Deep Hashing with a Single
Cosine Similarity based Learning Objective", NeurIPS 2021, arXiv 2109.14449; the authors' code
kamwoh/orthohash).

The continuous code is v = BN(W x): the hashing layer without bias, then batch norm
(`head_norm`), which makes each bit zero-mean over the batch and so balances the bits. Each class
k has a fixed +-1 code c_k (a Bernoulli(1/2) codebook, the paper's default "B", drawn once from the
fit's seeded stream), and one loss, a cross-entropy over scaled cosine logits with an additive
margin on the true class:

    z_ik = s * (cos(v_i, c_k) - m * 1[k = y_i]),     L = mean_i CE(z_i, y_i)

(the paper's text was not at hand here: the terms are named after the authors' code, not
numbered). Maximising cos(v, c_y) both moves sgn(v) towards c_y in Hamming space and shrinks the
quantisation error, so the paper needs no other term (its optional 1 - cos(v, sgn v) is off by
default and not offered here). Codes are sgn(v) of the batch-normed output with its running
statistics (the shared encoding); the codebook is used in training only. s = 8, m = 0.2.

Multi-label items: the authors' default "label smoothing" cross-entropy: the softmax target is
the item's labels l / sum(l) and the margin is taken off every positive class; its labels are
its deepest labelled level's nodes (shdh.hashers.class_table).
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F

from shdh.hashers.class_table import class_lookup, class_rows, class_sets, finest_classes
from shdh.hashers.deep import DeepHasher
from shdh.hashers.method_settings import REDUCTIONS, OrthoHashSettings
from shdh.training.objective import Bank, Objective, Task

CODEBOOK_SALT = 1  # task.generator's stream for the codebook


def orthohash_loss(
    v: torch.Tensor,
    codebook: torch.Tensor,
    labels: torch.Tensor,
    *,
    scale: float = 8.0,
    margin: float = 0.2,
    reduction: str = "mean",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """OrthoHash's L for one batch: v (B, L) the batch-normed outputs, codebook (C, L) +-1,
    labels (B,) class rows or (B, C) 0/1 label sets of multi-label items. Per item, the
    cross-entropy of z = s (cos(v, c) - m l) against l / sum(l) (one-hot l: the plain CE of
    the single label); "mean" averages the items (the paper's), "sum" sums them. Returns the
    loss and detached {"e1": the loss, "accuracy": the nearest code's, single-label}."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"orthohash_loss: reduction must be one of {REDUCTIONS}")
    cos = F.normalize(v, dim=1) @ F.normalize(codebook, dim=1).T  # (B, C) cos(v_i, c_k)
    single = labels.ndim == 1
    hot = F.one_hot(labels, len(codebook)).to(v.dtype) if single else labels.to(v.dtype)
    logits = scale * (cos - margin * hot)  # (B, C): the margin on every positive class
    target = hot / hot.sum(dim=1, keepdim=True)  # l / sum(l)
    ce = -(target * F.log_softmax(logits, dim=1)).sum(dim=1)  # (B,)
    loss = ce.mean() if reduction == "mean" else ce.sum()
    parts = {"e1": loss.detach()}
    if single:
        parts["accuracy"] = (cos.argmax(dim=1) == labels).float().mean().detach()
    return loss, parts


class OrthoHashObjective(Objective):
    """OrthoHash's loss with its codebook, one +-1 code per finest class (a buffer), after a
    batch-normed hashing layer."""

    name: ClassVar[str] = "orthohash"
    head_norm: ClassVar[bool] = True  # v = BN(W x), in the saved network too

    def __init__(self, settings: OrthoHashSettings, task: Task) -> None:
        super().__init__(settings, task)
        classes = finest_classes(task.ancestors)
        self.register_buffer("lookup", class_lookup(classes), persistent=False)
        draw = torch.rand(len(classes), task.n_bits, generator=task.generator(CODEBOOK_SALT))
        self.register_buffer("codebook", torch.where(draw < 0.5, -1.0, 1.0))  # (C, L)

    def forward(
        self, z: torch.Tensor, anc: torch.Tensor, bank: Bank = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        if anc.ndim == 2:
            labels = class_rows(self.lookup, anc)  # (B,)
        else:
            labels = class_sets(self.lookup, anc, len(self.codebook))  # (B, C)
        settings = self.settings
        return orthohash_loss(
            z,
            self.codebook,
            labels,
            scale=settings.scale,
            margin=settings.margin,
            reduction=settings.reduction,
        )


class OrthoHash(DeepHasher):
    """OrthoHash: one segment, plain Hamming; a batch-normed head trained to a fixed codebook."""

    supervision: ClassVar[str | None] = "label"
    objective = OrthoHashObjective
