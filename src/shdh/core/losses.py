"""The SHDH training objective (paper Eq. 5-8), made consistent as docs/method.md "Loss" records.

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

`dpsh_loss` is the deep baseline's objective (DPSH, Li, Wang & Kang, IJCAI 2016) on the same
pairs, so that SHDH and DPSH differ in their loss only.
"""

from collections.abc import Sequence
from dataclasses import dataclass

import torch

from shdh.core.loss_settings import (
    E1_MODES,
    E2_MODES,
    REDUCTIONS,
    TARGETS,
)
from shdh.core.similarity import check_ancestor_shape


def check_choice(name: str, value: str, choices: tuple[str, ...], where: str = "shdh_loss"):
    if value not in choices:
        raise ValueError(f"{where}: {name} must be one of {choices}, got {value!r}")


def _same_node(anc_i: torch.Tensor, anc_j: torch.Tensor, level: int) -> torch.Tensor:
    """s^k_ij (Eq. 1) as a bool (len(anc_i), len(anc_j)) block; -1 (no node) never matches and
    the root level k = 1 is never "similar" (it would be shared by everything). Ancestor sets
    (n, K, M) match when their level-k sets intersect."""
    if level == 1:
        return torch.zeros(len(anc_i), len(anc_j), dtype=torch.bool, device=anc_i.device)
    if anc_i.ndim == 3:
        return _sets_intersect(anc_i[:, level - 1], anc_j[:, level - 1])  # (B, M), (P, M)
    a = anc_i[:, level - 1]  # (B,)
    b = anc_j[:, level - 1]  # (P,)
    return (a[:, None] == b[None, :]) & (a[:, None] != -1)  # (B, P)


def _sets_intersect(sets_a: torch.Tensor, sets_b: torch.Tensor) -> torch.Tensor:
    """(A, B) bool: do rows of sets_a (A, Ma) and sets_b (B, Mb) share a node id (-1 never)?

    As shdh.core.similarity.sets_intersect: multi-hot rows over the ids present, one matrix product
    (exact: 0/1 entries, counts <= M, even in TF32).
    """
    ids, inv = torch.unique(
        torch.cat([sets_a.reshape(-1), sets_b.reshape(-1)]), return_inverse=True
    )
    keep = (ids >= 0).to(torch.float32)  # the -1 column, if any, counts for nothing

    def multi_hot(index: torch.Tensor) -> torch.Tensor:
        hot = torch.zeros(index.shape[0], ids.shape[0], dtype=torch.float32, device=ids.device)
        return hot.scatter_(1, index, 1.0) * keep

    n_a = sets_a.numel()
    hot_a = multi_hot(inv[:n_a].reshape(sets_a.shape))
    hot_b = multi_hot(inv[n_a:].reshape(sets_b.shape))
    return hot_a @ hot_b.T > 0


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
    check_choice("e1", e1, E1_MODES)
    check_choice("e2", e2, E2_MODES)
    check_choice("reduction", reduction, REDUCTIONS)
    check_choice("target", target, TARGETS)
    sizes = [int(s) for s in segment_sizes]
    levels = [int(k) for k in segment_levels]
    u = [float(w) for w in layer_weights]
    anc = _check_shdh_inputs(z, anc, sizes, levels, len(u), alpha)
    dtype = torch.promote_types(z.dtype, torch.float32)  # bf16 autocast outputs -> float32
    h = torch.tanh(z.to(dtype))  # (B, L) relaxed codes h~
    bank = _bank_partners(h, anc, bank_z, bank_anc, "shdh_loss")
    h_p, anc_p = h, anc  # partners: the batch ...
    if bank is not None:
        h_p = torch.cat([h, torch.tanh(bank[0].detach().to(dtype))])  # (B+M, L) ... and the bank
        anc_p = torch.cat([anc, bank[1]])  # (B+M, K), or (B+M, K, set width)
    pair_mask, n_pairs = _pair_mask(h.shape[0], h_p.shape[0], z.device)
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


def _bank_partners(
    x: torch.Tensor,
    anc: torch.Tensor,
    bank_z: torch.Tensor | None,
    bank_anc: torch.Tensor | None,
    where: str,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The memory bank (outputs, ancestors) after checking it against the batch, or None."""
    if (bank_z is None) != (bank_anc is None):
        raise ValueError(f"{where}: bank_z and bank_anc must be given together")
    if bank_z is None:
        return None
    bank_anc = torch.as_tensor(bank_anc, device=x.device)
    if bank_z.ndim != 2 or bank_z.shape[1] != x.shape[1]:
        raise ValueError(f"{where}: bank_z must be (M, {x.shape[1]}), got {bank_z.shape}")
    if bank_anc.shape != (bank_z.shape[0], *anc.shape[1:]):
        raise ValueError(
            f"{where}: bank_anc must be {(bank_z.shape[0], *anc.shape[1:])} (bank size, "
            f"then anc's layout), got {tuple(bank_anc.shape)}"
        )
    return bank_z, bank_anc


def _pair_mask(n_batch: int, n_partners: int, device: torch.device) -> tuple[torch.Tensor, int]:
    """(B, B+M) bool: anchor i pairs with every partner but itself; and the number of pairs,
    counted rather than summed, so that no host sync happens per step."""
    pair_mask = torch.ones(n_batch, n_partners, dtype=torch.bool, device=device)
    pair_mask[:, :n_batch].fill_diagonal_(False)  # no self-pairs in the batch
    return pair_mask, n_batch * (n_partners - 1)


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
        sk = _same_node(anc, anc_p, level).to(dtype)  # (B, B+M): s^k_ij (Eq. 1)
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


# --------------------------------------------------------------------------------------------
# DPSH (Li, Wang & Kang, IJCAI 2016), the deep baseline
# --------------------------------------------------------------------------------------------


def check_labelled(anc: torch.Tensor, name: str) -> None:
    """Every row must have a node at some level: DPSH's "same label" needs one. Reading the
    answer is a host sync, so the training loop checks its whole training set once instead of
    every batch (dpsh_loss(check_labels=False))."""
    present = anc >= 0 if anc.ndim == 2 else (anc >= 0).any(2)  # (n, K)
    if not bool(present.any(1).all()):
        raise ValueError(f"dpsh_loss: {name} has a row with no node (all -1)")


def _finest_nodes(anc: torch.Tensor, name: str, check: bool = True) -> torch.Tensor:
    """Each row's node(s) at its deepest level with a node: its leaf (n,) for (n, K) ids, its
    node set (n, M) for (n, K, M) ancestor sets. DPSH's "same label" compares these, exactly as
    shdh.core.similarity.finest_match does for the shallow baselines."""
    if check:
        check_labelled(anc, name)
    present = anc >= 0 if anc.ndim == 2 else (anc >= 0).any(2)  # (n, K)
    deepest = anc.shape[1] - 1 - present.flip(1).int().argmax(1)  # (n,) last level with a node
    return anc[torch.arange(anc.shape[0], device=anc.device), deepest]


def _same_finest(fin_a: torch.Tensor, fin_b: torch.Tensor) -> torch.Tensor:
    """(A, B) bool "same finest label" from _finest_nodes: equal leaves, or intersecting sets."""
    if fin_a.ndim == 2:  # (n, M) deepest-level sets
        return _sets_intersect(fin_a, fin_b)
    return fin_a[:, None] == fin_b[None, :]


def _check_dpsh_inputs(
    z: torch.Tensor, anc: torch.Tensor, eta: float, reduction: str
) -> torch.Tensor:
    """dpsh_loss's settings and shapes checked; anc as a tensor on z's device."""
    check_choice("reduction", reduction, REDUCTIONS)
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
    Returns the scalar loss and detached {"e1": likelihood term, "e2": eta * quantisation term}.
    """
    anc = _check_dpsh_inputs(z, anc, eta, reduction)
    dtype = torch.promote_types(z.dtype, torch.float32)  # bf16 autocast outputs -> float32
    u = z.to(dtype)  # (B, L)
    n_batch = u.shape[0]
    leaf = _finest_nodes(anc, "anc", check_labels)  # (B,) leaves or (B, M) deepest sets
    bank = _bank_partners(u, anc, bank_z, bank_anc, "dpsh_loss")
    u_p, leaf_p = u, leaf  # partners: the batch ...
    if bank is not None:
        u_p = torch.cat([u, bank[0].detach().to(dtype)])  # (B+M, L) ... and the bank
        leaf_p = torch.cat([leaf, _finest_nodes(bank[1], "bank_anc", check_labels)])
    pair_mask, n_pairs = _pair_mask(n_batch, u_p.shape[0], z.device)
    if n_pairs == 0:
        raise ValueError("dpsh_loss: needs >= 2 batch items or a memory bank (no pairs)")

    theta = u @ u_p.T / 2.0  # (B, B+M): theta_ij = <u_i, u_j> / 2
    s = _same_finest(leaf, leaf_p).to(dtype)  # (B, B+M): s_ij in {0, 1}
    nll = torch.nn.functional.softplus(theta) - s * theta  # log(1 + e^theta) - s theta, stable
    likelihood = torch.where(pair_mask, nll, 0.0).sum()
    b = torch.where(u > 0, 1.0, -1.0).to(dtype)  # b_i = sgn(u_i), sgn(0) = -1, no gradient
    quantisation = (b - u).pow(2).sum()  # sum_i ||b_i - u_i||^2
    norm = n_batch if reduction == "sum" else n_pairs
    e1 = likelihood / norm
    e2 = eta * quantisation / norm
    return e1 + e2, {"e1": e1.detach(), "e2": e2.detach()}
