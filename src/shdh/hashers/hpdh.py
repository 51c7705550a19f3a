"""HPDH: Semantic Hierarchy Preserving Deep Hashing (Zhang, Zhe, Ou-Yang, Chen & Yan, "Semantic
Hierarchy Preserving Deep Hashing for Large-Scale Image Retrieval", arXiv 1901.11259; the authors'
code mzhang367/hpdh, loss.py and train_hpdh.py), the hierarchical peer of SHDH: it learns from
every level of the label tree, not from the finest label alone.

Each tree level l below the root has a centre mu^l_c in R^L per node c and an inverse variance
rho_l; an item's output u is scored against a level's nodes by a Gaussian class model

    p_l(c | u) = softmax_c(-rho_l / 2 * ||u - mu^l_c||^2)

and the loss sums the levels' negative log-likelihoods of the item's ancestors, unweighted (a
level's weight is its rho: a coarse level has a smaller rho, wider Gaussians), plus two
regularisers divided by the code length L:

    L = sum_{l >= 2} mean_i -log p_l(a_l(i) | u_i) + (w_cub R_cub + w_vert R_vert) / L
    R_cub  = mean_i sum_k max(0, |u_ik| - 1.1)      (outputs inside a slightly enlarged cube)
    R_vert = mean_i ||sgn(u_i) - u_i||^2            (outputs near the cube's vertices)

(the paper's text was not at hand here: the terms are named after the authors' code, not
numbered). rho runs linearly from rho_finest at the finest level to rho_coarsest at the
coarsest one below the root, a rule for any tree height that gives the authors' CIFAR-100
values (1, 0.5) and, with rho_coarsest 0.25, nearly their NABirds ones (1, 0.75, 0.5, 0.25
against 1, 0.67, 0.5, 0.25).

The centres get no gradient. The first epoch trains against a seeded N(0, 1) draw per level (the
authors' torch.randn, from the fit's own stream here). After every epoch the finest centres
become the mean output of each class's items over that epoch (per-class sums and counts that
the forward pass accumulates without gradient, instead of the authors' extra pass over the
shuffled, augmented loader in train mode), a class no item reached keeping its centre (no NaN),
and each parent's centre becomes the mean of its children's (classes count equally, as the
authors'). Centres, sums and counts are buffers, kept in every checkpoint.

An item labelled at an inner node (-1 below it) is its own leaf at the deeper levels: the
authors copy the parent label down. Multi-label data is refused: the paper defines no form for it.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from shdh.core.batch_pairs import check_labelled
from shdh.hashers.class_table import class_lookup, refuse_multi_label
from shdh.hashers.deep import DeepHasher
from shdh.hashers.method_settings import REDUCTIONS, HPDHSettings
from shdh.training.objective import Bank, Objective, Task

CUBE = 1.1  # R_cub's half side: the authors' relu(|u| - 1.1)


def filled_ancestors(anc: torch.Tensor) -> torch.Tensor:
    """(N, K) ancestor ids with each -1 level taking the node above it: an item labelled at an
    inner node is its own leaf below (the authors copy the parent label down)."""
    out = anc.clone()
    for k in range(1, out.shape[1]):
        out[:, k] = torch.where(out[:, k] >= 0, out[:, k], out[:, k - 1])
    return out


def level_rhos(height: int, rho_finest: float, rho_coarsest: float) -> list[float]:
    """rho_l for the levels 2..K (coarsest first): linear from rho_coarsest at level 2 to
    rho_finest at level K; a tree with one level below the root has rho_finest only."""
    n = height - 1
    if n == 1:
        return [float(rho_finest)]
    return [rho_coarsest + (rho_finest - rho_coarsest) * i / (n - 1) for i in range(n)]


def hpdh_loss(
    u: torch.Tensor,
    targets: list[torch.Tensor],
    centres: list[torch.Tensor],
    rhos: list[float],
    *,
    w_cub: float = 10.0,
    w_vert: float = 0.1,
    reduction: str = "mean",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """HPDH's L for one batch: u (B, L) outputs; per level, targets (B,) the rows of the items'
    nodes in that level's centres (n_l, L) and its rho. "mean" averages the items (the paper's),
    "sum" sums them, in every term alike. Returns the loss and detached {"e1": the levels'
    negative log-likelihoods, "e2": (w_cub R_cub + w_vert R_vert) / L}."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"hpdh_loss: reduction must be one of {REDUCTIONS}")
    reduce = torch.mean if reduction == "mean" else torch.sum
    e1 = u.new_zeros(())
    for target, mu, rho in zip(targets, centres, rhos, strict=True):
        d2 = (u[:, None, :] - mu[None, :, :]).pow(2).sum(dim=2)  # (B, n_l) ||u_i - mu_c||^2
        e1 = e1 + reduce(F.cross_entropy(-0.5 * rho * d2, target, reduction="none"))
    cube = F.relu(u.abs() - CUBE).sum(dim=1)  # (B,)
    b = torch.where(u > 0, 1.0, -1.0)  # sgn(u), sgn(0) = -1, a constant
    vertex = (b - u).pow(2).sum(dim=1)  # (B,)
    e2 = (w_cub * reduce(cube) + w_vert * reduce(vertex)) / u.shape[1]
    return e1 + e2, {"e1": e1.detach(), "e2": e2.detach()}


class HPDHObjective(Objective):
    """HPDH's loss with its per-level centres, recomputed after every epoch (end_epoch) from the
    class sums its forward pass accumulates."""

    name: ClassVar[str] = "hpdh"

    def __init__(self, settings: HPDHSettings, task: Task) -> None:
        super().__init__(settings, task)
        if task.multi_label or task.height < 2:
            raise ValueError("hpdh: needs one ancestor path per item and levels below the root")
        anc = filled_ancestors(torch.as_tensor(task.ancestors, dtype=torch.long))  # (N, K)
        self.levels = list(range(2, task.height + 1))  # coarsest first
        self.rhos = level_rhos(task.height, settings.rho_finest, settings.rho_coarsest)
        n_bits = task.n_bits
        for level in self.levels:
            classes = np.unique(anc[:, level - 1].numpy())
            self.register_buffer(f"lookup{level}", class_lookup(classes), persistent=False)
            draw = torch.randn(len(classes), n_bits, generator=task.generator(level))
            self.register_buffer(f"centres{level}", draw)  # (n_l, L) the first epoch's
        for level in self.levels[:-1]:  # each child's row -> its parent's row
            pairs = np.unique(anc[:, level - 1 : level + 1].numpy(), axis=0)  # (parent, child)
            parent = getattr(self, f"lookup{level}")[torch.as_tensor(pairs[:, 0])]
            child = getattr(self, f"lookup{level + 1}")[torch.as_tensor(pairs[:, 1])]
            parent_of = torch.zeros(len(child), dtype=torch.long)
            parent_of[child] = parent
            self.register_buffer(f"parent{level + 1}", parent_of, persistent=False)
        n_finest = len(self.centres(self.levels[-1]))
        self.register_buffer("sums", torch.zeros(n_finest, n_bits))  # this epoch's, per class
        self.register_buffer("counts", torch.zeros(n_finest))

    def centres(self, level: int) -> torch.Tensor:
        return getattr(self, f"centres{level}")

    def forward(
        self, z: torch.Tensor, anc: torch.Tensor, bank: Bank = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        anc = filled_ancestors(anc.long())
        targets = [getattr(self, f"lookup{k}")[anc[:, k - 1]] for k in self.levels]
        if self.training:  # the finest classes' sums for end_epoch's centres
            with torch.no_grad():
                self.sums.index_add_(0, targets[-1], z.detach())
                self.counts.index_add_(0, targets[-1], torch.ones_like(targets[-1], dtype=z.dtype))
        settings = self.settings
        return hpdh_loss(
            z,
            targets,
            [self.centres(k) for k in self.levels],
            self.rhos,
            w_cub=settings.w_cub,
            w_vert=settings.w_vert,
            reduction=settings.reduction,
        )

    @torch.no_grad()
    def end_epoch(self) -> None:
        """The finest centres from the epoch's class means (a class not seen keeps its own), then
        each coarser level's as the mean of its children's; the sums start again. In place, so a
        captured CUDA graph reads the new centres."""
        finest = self.centres(self.levels[-1])
        seen = self.counts > 0
        means = self.sums / self.counts.clamp(min=1.0)[:, None]
        finest.copy_(torch.where(seen[:, None], means, finest))
        for level in reversed(self.levels[:-1]):
            children, parent_of = self.centres(level + 1), getattr(self, f"parent{level + 1}")
            total = torch.zeros_like(self.centres(level)).index_add_(0, parent_of, children)
            count = torch.zeros(len(total), device=total.device).index_add_(
                0, parent_of, torch.ones(len(parent_of), device=total.device)
            )
            self.centres(level).copy_(total / count.clamp(min=1.0)[:, None])
        self.sums.zero_()
        self.counts.zero_()


class HPDH(DeepHasher):
    """HPDH: one segment, plain Hamming; Gaussian class models at every level of the tree."""

    supervision: ClassVar[str | None] = "hierarchical"
    objective = HPDHObjective

    def _prepare(self, anc: np.ndarray) -> None:
        refuse_multi_label(self.name, anc, "HPDH's paper defines no multi-label form")
        check_labelled(torch.as_tensor(anc), "ancestors", self.name)
        if anc.shape[1] < 2:
            raise ValueError(f"{self.name}: needs a tree with levels below the root, got K=1")
        filled = filled_ancestors(torch.as_tensor(anc, dtype=torch.long))[:, 1:]
        rows = np.flatnonzero((filled < 0).any(dim=1).numpy())
        if len(rows):
            raise ValueError(
                f"{self.name}: ancestors row {int(rows[0])} has a node below levels without "
                "one (-1): each item's path must reach up to the top of the tree"
            )
