"""The pairs of a training batch, on the device: which items share a node at a level (s^k_ij,
paper Eq. 1), the finest label (the baselines' 0/1 similarity), the level-weighted similarity
(Eq. 3) and its gain in [0, 1]; the partners of the batch's anchors, the batch itself and an
optional memory bank of past outputs. The deep methods' objectives (shdh.hashers) share these,
so every pairwise loss pairs and labels items the same way.

Nothing here reads a tensor's values back to the host in a training step (a host sync stalls a
GPU step): checks that must (check_labelled) are for the caller to run once over its items.
"""

from collections.abc import Sequence

import torch

from shdh.core.similarity import check_ancestor_shape


def same_node(anc_i: torch.Tensor, anc_j: torch.Tensor, level: int) -> torch.Tensor:
    """s^k_ij (Eq. 1) as a bool (len(anc_i), len(anc_j)) block; -1 (no node) never matches and
    the root level k = 1 is never "similar" (it would be shared by everything). Ancestor sets
    (n, K, M) match when their level-k sets intersect."""
    if level == 1:
        return torch.zeros(len(anc_i), len(anc_j), dtype=torch.bool, device=anc_i.device)
    if anc_i.ndim == 3:
        return sets_intersect(anc_i[:, level - 1], anc_j[:, level - 1])  # (B, M), (P, M)
    a = anc_i[:, level - 1]  # (B,)
    b = anc_j[:, level - 1]  # (P,)
    return (a[:, None] == b[None, :]) & (a[:, None] != -1)  # (B, P)


def sets_intersect(sets_a: torch.Tensor, sets_b: torch.Tensor) -> torch.Tensor:
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


def bank_partners(
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


def partner_mask(n_batch: int, n_partners: int, device: torch.device) -> tuple[torch.Tensor, int]:
    """(B, B+M) bool: anchor i pairs with every partner but itself; and the number of pairs,
    counted rather than summed, so that no host sync happens per step."""
    pair_mask = torch.ones(n_batch, n_partners, dtype=torch.bool, device=device)
    pair_mask[:, :n_batch].fill_diagonal_(False)  # no self-pairs in the batch
    return pair_mask, n_batch * (n_partners - 1)


def check_labelled(anc: torch.Tensor, name: str, where: str = "dpsh_loss") -> None:
    """Every row must have a node at some level: a finest-label similarity needs one. Reading the
    answer is a host sync, so the training loop checks its whole training set once instead of
    every batch (dpsh_loss(check_labels=False))."""
    present = anc >= 0 if anc.ndim == 2 else (anc >= 0).any(2)  # (n, K)
    if not bool(present.any(1).all()):
        raise ValueError(f"{where}: {name} has a row with no node (all -1)")


def finest_nodes(anc: torch.Tensor, name: str, check: bool = True) -> torch.Tensor:
    """Each row's node(s) at its deepest level with a node: its leaf (n,) for (n, K) ids, its
    node set (n, M) for (n, K, M) ancestor sets. DPSH's "same label" compares these, exactly as
    shdh.core.similarity.finest_match does for the shallow baselines."""
    if check:
        check_labelled(anc, name)
    present = anc >= 0 if anc.ndim == 2 else (anc >= 0).any(2)  # (n, K)
    deepest = anc.shape[1] - 1 - present.flip(1).int().argmax(1)  # (n,) last level with a node
    return anc[torch.arange(anc.shape[0], device=anc.device), deepest]


def same_finest(fin_a: torch.Tensor, fin_b: torch.Tensor) -> torch.Tensor:
    """(A, B) bool "same finest label" from _finest_nodes: equal leaves, or intersecting sets."""
    if fin_a.ndim == 2:  # (n, M) deepest-level sets
        return sets_intersect(fin_a, fin_b)
    return fin_a[:, None] == fin_b[None, :]


def level_weighted_gain(
    anc_i: torch.Tensor, anc_j: torch.Tensor, layer_weights: Sequence[float]
) -> torch.Tensor:
    """g_ij = sum_k u_k s^k_ij in [0, 1] (METHOD.md: the gain of weighted recall), i.e.
    (s_ij + 1) / 2 for the hierarchical similarity s_ij of Eq. 3: 1 for the same leaf, the
    weights of the shared levels for items related higher up, 0 for unrelated ones. The "+H"
    methods take it in place of the 0/1 finest-label similarity."""
    dtype = torch.float32
    gain = torch.zeros(len(anc_i), len(anc_j), dtype=dtype, device=anc_i.device)
    for level, uk in enumerate(layer_weights, start=1):
        if uk != 0:
            gain = gain + float(uk) * same_node(anc_i, anc_j, level).to(dtype)
    return gain


def batch_ancestors(z: torch.Tensor, anc: torch.Tensor, where: str) -> torch.Tensor:
    """anc as a tensor on z's device, once z is (B, L) with B >= 2 (a pair needs two items) and
    anc (B, K) ancestor ids or (B, K, M) ancestor sets: the shapes only, no host sync."""
    if z.ndim != 2 or z.shape[0] < 2:
        raise ValueError(f"{where}: z must be (B, L) with B >= 2 (pairs), got {tuple(z.shape)}")
    anc = torch.as_tensor(anc, device=z.device)
    check_ancestor_shape(anc.shape, f"{where}: anc", rows=z.shape[0], rows_of="z has")
    return anc


def balanced_pair_mean(
    loss: torch.Tensor, positive: torch.Tensor, negative: torch.Tensor
) -> torch.Tensor:
    """HashNet's weighted mean of pair losses, (1/|S|) sum_ij w_ij loss_ij with w_ij = |S|/|S1|
    on the similar pairs S1 and |S|/|S0| on the dissimilar S0 (DCH weighs its pairs so too): the
    mean over S1 plus the mean over S0. A batch without one of the two kinds (likely at coarse
    levels) has no weight to divide by; its missing mean counts 0, i.e. the other kind's plain
    mean, as the references' fallback to w = 1. Counted on the device: no host sync."""
    pos = torch.where(positive, loss, 0.0).sum() / positive.sum().clamp_min(1)
    neg = torch.where(negative, loss, 0.0).sum() / negative.sum().clamp_min(1)
    return pos + neg
