"""SHDH: Supervised Hierarchical Deep Hashing (Wang, Huang, Lu, Feng, Nie, Wen & Mao, "Supervised
Deep Hashing for Hierarchical Labeled Data", AAAI 2018, arXiv 1704.02088), the paper this project
implements: a code of one segment per tree level, trained with J = E1 + E2 (Eq. 5-7, made
consistent as docs/method.md "Loss" records), ranked by the weighted Hamming distance (Eq. 4).

The paper's E1 (Eq. 5) compares an unnormalised, u-weighted inner product with s^k in {0, 1}; its
matrix form (Eq. 8) compares H A H^T with L*S; its E2 (Eq. 6) is called an entropy term but, as
written, rewards equal codes. Here, with h~ = tanh(z) and per-segment normalised inner products

    rho^k_ij = <h~^k_i, h~^k_j> / L_k  in [-1, 1],

  E1 "levels" (default, Eq. 5 per level):  sum_k u_k (rho^k_ij - (2 s^k_ij - 1))^2
  E1 "matrix" (Eq. 7/8, L*S scale fixed):  (sum_k u_k rho^k_ij - s_ij)^2,
                                            s_ij = sum_k u_k (2 s^k_ij - 1)   (Eq. 3)
  E2 "balance" (default):  + alpha sum_k u_k ||mean_i h~^k_i||^2 / L_k  (balanced bits, the text)
  E2 "trace":              - alpha mean_i sum_k u_k ||h~^k_i||^2 / L_k  (-alpha tr(H A H^T), Eq. 8,
                                                                          bounded through tanh)
  J = E1 + E2 (Eq. 7).

Pairs are (anchor i in the batch, partner j) with j over the other batch items (i == j left out:
a self-pair carries no similarity information, only a quantisation push that E2 "trace" already
provides with its own weight) and, optionally, a memory bank of detached past outputs, as DPSH
does. An item's own stale output in the bank is kept as a partner like any other (the bank carries
no item ids); the training loop leaves the current batch's items out of the bank it passes.

Scale matters as much as form (docs/method.md): reduction "sum" (default) sums over partners and
averages over anchors, about B times a mean over pairs; a plain mean ("mean", paper-literal scale,
kept for the ablation) left the optimiser at the h~ = 0 saddle. With a memory bank the "sum" scale
grows with the bank size, so gradient clipping matters even more there.
"""

from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import ClassVar

import numpy as np
import torch

from shdh.core.batch_pairs import bank_partners, partner_mask, same_node
from shdh.core.level_weights import segment_levels, segment_sizes
from shdh.core.similarity import check_ancestor_shape
from shdh.hashers.deep import DeepHasher, level_segment_sizes, level_segment_weights
from shdh.hashers.method_settings import E1_MODES, E2_MODES, REDUCTIONS, TARGETS, SHDHSettings
from shdh.training.objective import Bank, Objective, Task


class SHDHObjective(Objective):
    """J (Eq. 7) for the code's segments, with SHDH's settings."""

    name: ClassVar[str] = "shdh"

    def __init__(self, settings: SHDHSettings, task: Task) -> None:
        super().__init__(settings, task)
        self.terms = {
            "segment_sizes": task.segment_sizes,
            "segment_levels": task.segment_levels,
            "layer_weights": task.layer_weights,
            **{k: v for k, v in asdict(settings).items() if k in _LOSS_FIELDS},
        }

    def forward(
        self, z: torch.Tensor, anc: torch.Tensor, bank: Bank = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        bank_z, bank_anc = bank if bank is not None else (None, None)
        return shdh_loss(z, anc, bank_z=bank_z, bank_anc=bank_anc, **self.terms)


class SHDH(DeepHasher):
    """Supervised Hierarchical Deep Hashing: a segment per tree level (settings.layout), ranked
    by the weighted Hamming distance of Eq. 4."""

    supervision: ClassVar[str | None] = "hierarchical"
    objective = SHDHObjective

    def code_layout(self, K: int) -> tuple[list[int], list[int]]:
        layout = self.settings.layout
        return segment_sizes(self.n_bits, K, layout), segment_levels(K, layout)

    def segment_sizes(self) -> list[int]:
        return level_segment_sizes(self)

    def segment_weights(self) -> list[float]:
        return level_segment_weights(self)


_LOSS_FIELDS = ("alpha", "e1", "e2", "target", "reduction")  # SHDHSettings' that J takes


def shdh_loss(
    z: torch.Tensor,
    anc: torch.Tensor,
    *,
    segment_sizes: Sequence[int],
    segment_levels: Sequence[int],
    layer_weights: Sequence[float],
    alpha: float = 1.0,
    e1: str = "levels",
    e2: str = "balance",
    reduction: str = "sum",
    target: str = "signed",
    bank_z: torch.Tensor | None = None,
    bank_anc: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """J = E1 + E2 for one batch: z (B, L) hashing-layer outputs, anc (B, K) ancestor ids or
    (B, K, M) ancestor sets (bank_anc: the same layout and M).

    segment_levels[s] is the 1-based tree level of segment s; layer_weights[k-1] is u_k (Eq. 2).
    Returns the scalar loss and detached {"e1", "e2"} for logging.
    """
    for name, value, allowed in (
        ("e1", e1, E1_MODES),
        ("e2", e2, E2_MODES),
        ("reduction", reduction, REDUCTIONS),
        ("target", target, TARGETS),
    ):
        if value not in allowed:
            raise ValueError(f"shdh_loss: {name} must be one of {allowed}, got {value!r}")
    sizes = [int(s) for s in segment_sizes]
    levels = [int(k) for k in segment_levels]
    u = [float(w) for w in layer_weights]
    anc = _check_shdh_inputs(z, anc, sizes, levels, len(u), alpha)
    dtype = torch.promote_types(z.dtype, torch.float32)  # bf16 autocast outputs -> float32
    h = torch.tanh(z.to(dtype))  # (B, L) relaxed codes h~
    bank = bank_partners(h, anc, bank_z, bank_anc, "shdh_loss")
    h_p, anc_p = h, anc  # partners: the batch ...
    if bank is not None:
        h_p = torch.cat([h, torch.tanh(bank[0].detach().to(dtype))])  # (B+M, L) ... and the bank
        anc_p = torch.cat([anc, bank[1]])  # (B+M, K), or (B+M, K, set width)
    pair_mask, n_pairs = partner_mask(h.shape[0], h_p.shape[0], z.device)
    if reduction == "mean" and n_pairs == 0:
        raise ValueError("shdh_loss: reduction='mean' needs >= 2 batch items or a memory bank")

    if h.is_cuda and bank is None and anc.ndim == 2 and e1 == "levels":
        e1_pair, e2_sum = _stacked_level_terms(h, anc, sizes, levels, u, e2, target)
    else:
        e1_pair, e2_sum = _level_terms(h, h_p, anc, anc_p, sizes, levels, u, e1, e2, target)
    e1_sum = torch.where(pair_mask, e1_pair, 0.0).sum()
    e1_val = e1_sum / h.shape[0] if reduction == "sum" else e1_sum / n_pairs
    e2_val = alpha * e2_sum
    loss = e1_val + e2_val  # Eq. 7: J = E1 + E2 term
    return loss, {"e1": e1_val.detach(), "e2": e2_val.detach()}


def _check_shdh_inputs(
    z: torch.Tensor,
    anc: torch.Tensor,
    sizes: list[int],
    levels: list[int],
    n_levels: int,
    alpha: float,
) -> torch.Tensor:
    """Shapes and choices only: nothing here reads a tensor's values (no host sync)."""
    if z.ndim != 2 or z.shape[1] != sum(sizes):
        raise ValueError(f"shdh_loss: z must be (B, {sum(sizes)}), got {tuple(z.shape)}")
    anc = torch.as_tensor(anc, device=z.device)
    check_ancestor_shape(
        anc.shape, "shdh_loss: anc", rows=z.shape[0], rows_of="z has", n_levels=n_levels
    )
    if len(levels) != len(sizes):
        raise ValueError(f"shdh_loss: {len(sizes)} segment_sizes but {len(levels)} segment_levels")
    if any(not 1 <= k <= n_levels for k in levels) or len(set(levels)) != len(levels):
        raise ValueError(
            f"shdh_loss: segment_levels {levels} must be distinct levels in 1..{n_levels}"
        )
    if alpha < 0:
        raise ValueError(f"shdh_loss: alpha must be >= 0, got {alpha}")
    return anc


def _level_terms(
    h: torch.Tensor,
    h_p: torch.Tensor,
    anc: torch.Tensor,
    anc_p: torch.Tensor,
    sizes: list[int],
    levels: list[int],
    u: list[float],
    e1: str,
    e2: str,
    target: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """E1 per pair (B, B+M) and the unweighted E2 sum, segment by segment (Eq. 5-8)."""
    dtype = h.dtype
    e1_pair = torch.zeros(h.shape[0], h_p.shape[0], dtype=dtype, device=h.device)  # (B, B+M)
    pred = torch.zeros_like(e1_pair)  # "matrix": sum_k u_k rho^k_ij
    s_ij = torch.zeros_like(e1_pair)  # "matrix": s_ij (Eq. 3)
    e2_sum = torch.zeros((), dtype=dtype, device=h.device)
    start = 0
    for size, level in zip(sizes, levels, strict=True):
        hk, hk_p = h[:, start : start + size], h_p[:, start : start + size]  # (B, Lk), (B+M, Lk)
        start += size
        uk = u[level - 1]  # Eq. 2
        rho = hk @ hk_p.T / size  # (B, B+M) in [-1, 1]
        sk = same_node(anc, anc_p, level).to(dtype)  # (B, B+M): s^k_ij (Eq. 1)
        tk = 2.0 * sk - 1.0 if target == "signed" else sk  # rho target: +-1, or Eq. 5's {0, 1}
        if e1 == "levels":
            e1_pair = e1_pair + uk * (rho - tk) ** 2  # Eq. 5, per level
        else:
            pred = pred + uk * rho
            s_ij = s_ij + uk * tk  # Eq. 3
        if e2 == "balance":
            e2_sum = e2_sum + uk * hk.mean(0).pow(2).sum() / size  # Eq. 6 as balanced bits
        elif e2 == "trace":
            e2_sum = e2_sum - uk * hk.pow(2).sum(1).mean() / size  # Eq. 8: -tr(H A H^T) / B
    if e1 == "matrix":
        e1_pair = (pred - s_ij) ** 2  # Eq. 7/8 with target s_ij instead of L*S
    return e1_pair, e2_sum


@dataclass(frozen=True)
class _Stacked:
    """The per-bit constants of _stacked_level_terms for one code layout on one device."""

    masks: torch.Tensor  # (S, L) 1 on segment s's bits
    sizes: torch.Tensor  # (S, 1, 1) L_s
    columns: torch.Tensor  # (S,) ancestor column of each segment's level
    similar: torch.Tensor  # (S, 1, 1) False for the root level (never "similar")
    weights: torch.Tensor  # (S, 1, 1) u_k of each segment's level
    per_bit: torch.Tensor  # (L,) u_k / L_s of each bit's segment (E2)


_STACKED: dict[tuple, _Stacked] = {}


def _stacked_constants(
    sizes: list[int], levels: list[int], u: list[float], dtype: torch.dtype, device: torch.device
) -> _Stacked:
    """Made once per layout and device, then reused: a tensor made from Python numbers is a
    host-to-device copy, which a CUDA graph cannot hold and which stalls an eager step."""
    key = (tuple(sizes), tuple(levels), tuple(u), dtype, device)
    if key not in _STACKED:
        seg = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes))  # (L,)
        w = torch.tensor([u[k - 1] for k in levels], dtype=dtype)
        size = torch.tensor(sizes, dtype=dtype)
        _STACKED[key] = _Stacked(
            masks=(seg[None, :] == torch.arange(len(sizes))[:, None]).to(dtype).to(device),
            sizes=size.view(-1, 1, 1).to(device),
            columns=torch.tensor([k - 1 for k in levels]).to(device),
            similar=torch.tensor([k > 1 for k in levels]).view(-1, 1, 1).to(device),
            weights=w.view(-1, 1, 1).to(device),
            per_bit=(w / size)[seg].to(device),
        )
    return _STACKED[key]


def _stacked_level_terms(
    h: torch.Tensor,
    anc: torch.Tensor,
    sizes: list[int],
    levels: list[int],
    u: list[float],
    e2: str,
    target: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """_level_terms for E1 "levels" on a batch without a memory bank, every segment at once:
    the same sums (Eq. 5 per level, Eq. 6 / 8 for E2) up to float rounding, in a dozen kernels
    instead of a dozen per segment. A GPU step at batch 128 is bound by kernel launches, and
    this took the loss from half of an eager step's time. CPU fits keep _level_terms, so that
    their numbers stay bit-identical."""
    c = _stacked_constants(sizes, levels, u, h.dtype, h.device)
    rho = (h.unsqueeze(0) * c.masks.unsqueeze(1)) @ h.T / c.sizes  # (S, B, B) rho^k_ij
    node = anc[:, c.columns].T  # (S, B): each segment's level's node of every item
    same = (node[:, :, None] == node[:, None, :]) & (node[:, :, None] != -1) & c.similar
    sk = same.to(h.dtype)  # (S, B, B): s^k_ij (Eq. 1)
    tk = 2.0 * sk - 1.0 if target == "signed" else sk
    e1_pair = (c.weights * (rho - tk) ** 2).sum(0)  # (B, B), Eq. 5 summed over levels
    if e2 == "balance":
        e2_sum = (c.per_bit * h.mean(0).pow(2)).sum()
    elif e2 == "trace":
        e2_sum = -(c.per_bit * h.pow(2).mean(0)).sum()
    else:
        e2_sum = torch.zeros((), dtype=h.dtype, device=h.device)
    return e1_pair, e2_sum


def shdh_objective(
    segment_sizes: Sequence[int],
    segment_levels: Sequence[int],
    layer_weights: Sequence[float],
    settings: SHDHSettings | None = None,
) -> SHDHObjective:
    """SHDH's objective for a code layout, for a caller of the training loop itself (a benchmark,
    a test): J needs no labels beyond each batch's, so the task holds no training items."""
    task = Task(
        tuple(int(s) for s in segment_sizes),
        tuple(int(k) for k in segment_levels),
        tuple(float(w) for w in layer_weights),
        np.zeros((0, len(layer_weights)), dtype=np.int64),
    )
    return SHDHObjective(settings or SHDHSettings(), task)
