"""CSQ: Central Similarity Quantization (Yuan, Wang, Zhang, Tay, Jie, Liu & Feng, "Central
Similarity Quantization for Efficient Image and Video Retrieval", CVPR 2020, arXiv 1908.00347;
the authors' code yuanli2333/Hadamard-Matrix-for-hashing).

Each class c has a fixed hash centre c_y in {-1, +1}^L, chosen before training so that centres lie
far apart in Hamming space; every item's relaxed code h = tanh(u) is pulled towards its class's
centre. With the identity (tanh u + 1) / 2 = sigmoid(2u) the central similarity's binary
cross-entropy is computed on logits, which stays finite where tanh saturates:

    L_C = mean_i mean_k BCE(sigmoid(2 u_ik), (c_{y_i,k} + 1) / 2)      (central similarity)
    L_Q = mean_i mean_k (|tanh u_ik| - 1)^2                             (quantisation)
    L   = L_C + lambda_q * L_Q

(the paper's text was not at hand here: the terms are named, not numbered; its quantisation term
is, as the brief recalls, a log-cosh form, but all three reference codes square it, and so does
this one). Centres (hash_centres), from the code length L and the number of classes C:
  - L a power of 2 and C <= L: the first C rows of the Sylvester Hadamard matrix H_L (pairwise
    distance exactly L/2);
  - L a power of 2 and C <= 2L: rows of [H_L; -H_L] (distance L/2 or L);
  - otherwise (e.g. 48 bits, where DeepHash-pytorch's scipy Hadamard call fails): random centres
    with exactly floor(L/2) bits at -1, redrawn from the fit's seeded stream until the smallest
    pairwise distance reaches L/4 (DeepHash-pytorch's bound; the authors' tutorial asks 20 of
    64), keeping the farthest-apart draw of at most MAX_DRAWS when none does, never failing.
The centres are a buffer of the objective, kept in every checkpoint.

Multi-label items (the paper's NUS-WIDE and COCO): the centre of an item is the sign of the sum
of its labels' centres, a zero bit taken from one random +-1 vector drawn once (the authors'
Hash_center_multilables); its labels are its deepest labelled level's nodes
(shdh.hashers.class_table).
"""

from __future__ import annotations

from typing import ClassVar

import torch
import torch.nn.functional as F

from shdh.hashers.class_table import class_lookup, class_rows, class_sets, finest_classes
from shdh.hashers.deep import DeepHasher
from shdh.hashers.method_settings import REDUCTIONS, CSQSettings
from shdh.training.objective import Bank, Objective, Task

CENTRE_SALT, TIE_SALT = 1, 2  # task.generator's streams: the random centres, the tie vector
MAX_DRAWS = 100  # random centre tables drawn at most, looking for one far enough apart
MIN_DISTANCE = 0.25  # ... its smallest pairwise Hamming distance, as a fraction of the bits


def sylvester_hadamard(n: int) -> torch.Tensor:
    """(n, n) +-1 Hadamard matrix of Sylvester's construction, n a power of 2: H_1 = [1],
    H_2m = [[H_m, H_m], [H_m, -H_m]] (scipy.linalg.hadamard's rows, in its order)."""
    if n < 1 or n & (n - 1):
        raise ValueError(f"sylvester_hadamard: n must be a power of 2, got {n}")
    h = torch.ones(1, 1)
    while h.shape[0] < n:
        h = torch.cat([torch.cat([h, h], 1), torch.cat([h, -h], 1)], 0)
    return h


def min_distance(centres: torch.Tensor) -> float:
    """The smallest Hamming distance between two rows of a +-1 table (inf for one row)."""
    if len(centres) < 2:
        return float("inf")
    d = (centres.shape[1] - centres @ centres.T) / 2  # (C, C) d_H = (L - <c, c'>) / 2
    d.fill_diagonal_(float("inf"))
    return float(d.min())


def random_centres(n_classes: int, n_bits: int, generator: torch.Generator) -> torch.Tensor:
    """(C, L) +-1 centres with exactly floor(L/2) bits at -1 each: the first draw whose rows are
    at least MIN_DISTANCE * L apart, else the farthest-apart of MAX_DRAWS draws."""
    best, best_distance = None, -1.0
    for _ in range(MAX_DRAWS):
        order = torch.rand(n_classes, n_bits, generator=generator).argsort(dim=1)
        draw = torch.where(order < n_bits // 2, -1.0, 1.0)  # floor(L/2) bits at -1 per row
        distance = min_distance(draw)
        if distance > best_distance:
            best, best_distance = draw, distance
        if distance >= MIN_DISTANCE * n_bits:
            break
    return best


def hash_centres(n_classes: int, n_bits: int, generator: torch.Generator) -> torch.Tensor:
    """(C, L) float +-1 hash centres (the table of the module's docstring)."""
    power_of_two = n_bits & (n_bits - 1) == 0
    if power_of_two and n_classes <= 2 * n_bits:
        h = sylvester_hadamard(n_bits)
        return torch.cat([h, -h])[:n_classes].clone()
    return random_centres(n_classes, n_bits, generator)


def csq_loss(
    u: torch.Tensor,
    centres: torch.Tensor,
    *,
    lambda_q: float = 1e-3,
    reduction: str = "mean",
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """CSQ's L for one batch: u (B, L) the hashing layer's outputs, centres (B, L) each item's
    +-1 target centre. Per item, mean_k BCE(sigmoid(2u), (c+1)/2) + lambda_q mean_k
    (|tanh u| - 1)^2; "mean" averages the items (the paper's), "sum" sums them. Returns the
    loss and detached {"e1": the central similarity term, "e2": lambda_q x quantisation}."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"csq_loss: reduction must be one of {REDUCTIONS}")
    target = (centres + 1.0) / 2.0  # (B, L) in {0, 1}
    central = F.binary_cross_entropy_with_logits(2.0 * u, target, reduction="none").mean(1)
    quantisation = (torch.tanh(u).abs() - 1.0).pow(2).mean(1)  # (B,)
    reduce = torch.mean if reduction == "mean" else torch.sum
    e1, e2 = reduce(central), lambda_q * reduce(quantisation)
    return e1 + e2, {"e1": e1.detach(), "e2": e2.detach()}


class CSQObjective(Objective):
    """CSQ's loss with its hash centres, one per finest class (a buffer)."""

    name: ClassVar[str] = "csq"

    def __init__(self, settings: CSQSettings, task: Task) -> None:
        super().__init__(settings, task)
        classes = finest_classes(task.ancestors)
        self.register_buffer("lookup", class_lookup(classes), persistent=False)
        centres = hash_centres(len(classes), task.n_bits, task.generator(CENTRE_SALT))
        self.register_buffer("centres", centres)  # (C, L)
        tie = torch.rand(task.n_bits, generator=task.generator(TIE_SALT)) < 0.5
        self.register_buffer("tie", torch.where(tie, 1.0, -1.0))  # (L,) a multi-label zero bit

    def item_centres(self, anc: torch.Tensor) -> torch.Tensor:
        """(B, L) each item's target: its class's centre, or for a multi-label item the sign of
        its labels' centres' sum with the zero bits taken from `tie`."""
        if anc.ndim == 2:
            return self.centres[class_rows(self.lookup, anc)]
        total = class_sets(self.lookup, anc, len(self.centres)) @ self.centres  # (B, L)
        return torch.where(total == 0, self.tie, torch.sign(total))

    def forward(
        self, z: torch.Tensor, anc: torch.Tensor, bank: Bank = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return csq_loss(
            z,
            self.item_centres(anc),
            lambda_q=self.settings.lambda_q,
            reduction=self.settings.reduction,
        )


class CSQ(DeepHasher):
    """Central Similarity Quantization: one segment, plain Hamming; codes pulled to centres."""

    supervision: ClassVar[str | None] = "label"
    objective = CSQObjective
