"""What the pairwise and triplet methods' tests share: the research brief's toy batch (its worked
values are computed on it) and one tiny fit on the contract's toy tree, scored against seeded
random codes.

The toy batch (/work/shared/reference/deep-methods.md, section 0): four items of K = 4 bits; fine
classes 0 and 1 under coarse class 0, fine class 2 under coarse class 1. As ancestors of a K = 3
tree (root, coarse, fine) with node ids unique across levels: root 0, coarse 1 and 2, fine 3, 4, 5.
Only pair (1, 2) shares its fine class.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from shdh.core.level_weights import layer_weights
from shdh.core.metrics import evaluate
from shdh.hashers import hasher_class
from shdh.hashers.base import Hasher
from shdh.hashers.supervision import PairSimilarity
from shdh.ranking.exact import pack_codes
from tests.unit.toys import TINY_NET, TREE, deep_hasher, tree_set

U = torch.tensor(
    [
        [0.5, -0.5, 0.8, 0.1],
        [0.4, -0.6, 0.7, -0.2],
        [0.6, 0.3, -0.4, 0.2],
        [-0.7, 0.2, 0.3, -0.5],
    ],
    dtype=torch.float64,
)
ANC = torch.tensor([[0, 1, 3], [0, 1, 3], [0, 1, 4], [0, 2, 5]])
# The brief's soft similarity (section 9) is the fraction of shared levels below the root,
# s = (1, 0.5, 0, 0.5, 0, 0): the level-weighted gain with these weights instead of SHDH's u_k.
FRACTION_OF_LEVELS = (0.0, 0.5, 0.5)
TOP_N = 50
N_BITS = 16


def sets_of(anc: torch.Tensor) -> torch.Tensor:
    """The same labels as (B, K, 2) ancestor sets, a -1 pad beside each node: a multi-label
    method must read them as the single labels they are."""
    return torch.stack([anc, torch.full_like(anc, -1)], dim=2)


@dataclass
class Scored:
    """One method fitted on the toy tree, and its ACG and NDCG at 50 beside random codes'."""

    hasher: Hasher
    acg: float
    ndcg: float
    random_acg: float
    random_ndcg: float


def _acg_ndcg(q: np.ndarray, db: np.ndarray, q_anc: np.ndarray, db_anc: np.ndarray):
    metrics, _ = evaluate(
        pack_codes(q),
        pack_codes(db),
        q_anc,
        db_anc,
        [N_BITS],
        [1.0],
        n=TOP_N,
        wr_ns=(TOP_N,),
        curve_max=TOP_N,
    )
    return metrics[f"acg@{TOP_N}"], metrics[f"ndcg@{TOP_N}"]


def fit_and_score(method: str, work_dir, **budget) -> Scored:
    """The contract's setting (tests/unit/test_hashers_contract.py): 16 bits, seed 7, the toy
    tree of 3 x 3 classes, TINY_NET with the method's own budget on top."""
    _, X, db_anc = tree_set(seed=1, per_leaf=40)
    _, Q, q_anc = tree_set(seed=2, per_leaf=10)
    cls = hasher_class(method)
    params = {**TINY_NET, **budget}
    hasher = deep_hasher(cls, n_bits=N_BITS, seed=7, work_dir=str(work_dir), **params)
    hasher.fit(X, PairSimilarity(db_anc, layer_weights(TREE.height), cls.supervision))
    acg, ndcg = _acg_ndcg(hasher.encode(Q), hasher.encode(X), q_anc, db_anc)
    rng = np.random.default_rng(0)
    random_db = np.where(rng.random((len(X), N_BITS)) < 0.5, 1, -1).astype(np.int8)
    random_q = np.where(rng.random((len(Q), N_BITS)) < 0.5, 1, -1).astype(np.int8)
    random_acg, random_ndcg = _acg_ndcg(random_q, random_db, q_anc, db_anc)
    return Scored(hasher, acg, ndcg, random_acg, random_ndcg)
