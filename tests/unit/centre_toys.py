"""What the tests of the classification, centre and hierarchical deep methods (GreedyHash, CSQ,
OrthoHash, HPDH) share: the research brief's toy batch (shared/reference/deep-methods.md, section
0), whose worked values the loss tests check, and one small fit on the contract's toy tree with
its retrieval scored against seeded random codes."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from shdh.core.level_weights import layer_weights
from shdh.core.metrics import evaluate
from shdh.hashers.deep import DeepHasher
from shdh.hashers.supervision import PairSimilarity
from shdh.ranking.exact import pack_codes
from shdh.training.objective import Task
from tests.unit.toys import TINY_NET, TREE, deep_hasher, tree_set

# The brief's toy batch: K = 4 bits; fine classes 0, 1 under coarse class 0, fine class 2 under
# coarse class 1. As tree node ids (unique across levels): root 0, coarse 1 and 2, fine 3, 4, 5.
TOY_U = torch.tensor(
    [[0.5, -0.5, 0.8, 0.1], [0.4, -0.6, 0.7, -0.2], [0.6, 0.3, -0.4, 0.2], [-0.7, 0.2, 0.3, -0.5]]
)
TOY_ANC = torch.tensor([[0, 1, 3], [0, 1, 3], [0, 1, 4], [0, 2, 5]])
# The first three rows of scipy's H_4: the brief's CSQ centres and OrthoHash codebook.
TOY_CODES = torch.tensor([[1.0, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1]])


def toy_task(ancestors: torch.Tensor = TOY_ANC, seed: int = 0) -> Task:
    """The Task of a 4-bit code trained on `ancestors` (one segment, the tree's K = 3)."""
    return Task((4,), (3,), tuple(layer_weights(3)), np.asarray(ancestors), seed)


def toy_sets() -> torch.Tensor:
    """The toy batch as multi-label ancestor sets (4, K=3, M=2): item 1 carries fine classes 0
    and 2 (the brief's multi-label example), the others their own single label."""
    sets = torch.full((4, 3, 2), -1)
    sets[:, :, 0] = TOY_ANC
    sets[0, 1, 1], sets[0, 2, 1] = 2, 5  # item 1 also in coarse class 1, fine class 2
    return sets


# One fit small enough for a unit test, large enough to learn the toy tree: TINY_NET's net, three
# epochs at a higher rate (a mean over the batch's items is ~B times smaller than SHDH's sum).
FIT_BUDGET = {**TINY_NET, "epochs": 3, "lr": 0.05}
TOP_N = 50


@dataclass
class ToyFit:
    """A method fitted on the contract's toy tree (3 superclasses x 3 classes, K = 3)."""

    hasher: DeepHasher
    images: np.ndarray
    pairs: PairSimilarity
    queries: np.ndarray
    query_anc: np.ndarray


def toy_pairs(cls: type, ancestors: np.ndarray) -> PairSimilarity:
    return PairSimilarity(ancestors, layer_weights(TREE.height), cls.supervision)


def fit_toy(cls: type, work_dir, resume: str = "never", **params) -> ToyFit:
    """cls fitted with FIT_BUDGET (and params) on tree_set's items, 16 bits, seed 7, its
    checkpoint in work_dir (resume: DeepHasher.fit's)."""
    _, images, anc = tree_set(seed=1, per_leaf=40)
    _, queries, query_anc = tree_set(seed=2, per_leaf=10)
    pairs = toy_pairs(cls, anc)
    budget = {"n_bits": 16, "seed": 7, **FIT_BUDGET, "work_dir": str(work_dir), **params}
    hasher = deep_hasher(cls, **budget).fit(images, pairs, resume=resume)
    return ToyFit(hasher, images, pairs, queries, query_anc)


def fit_task(fit: ToyFit) -> Task:
    """The Task the fit's objective was made from (one segment of 16 bits, seed 7)."""
    return Task((16,), (TREE.height,), tuple(fit.pairs.weights), fit.pairs.ancestors, 7)


def resumes_to_the_same_codes(cls: type, fit: ToyFit, work_dir, **params) -> None:
    """A fit interrupted one epoch short of `fit`'s (made with params), then resumed, gives
    `fit`'s uninterrupted codes."""
    epochs = len(fit.hasher.history_)
    fit_toy(cls, work_dir, **{**params, "epochs": epochs - 1})
    resumed = fit_toy(cls, work_dir, resume="always", **{**params, "epochs": epochs})
    assert [entry["epoch"] for entry in resumed.hasher.history_] == list(range(1, epochs + 1))
    np.testing.assert_array_equal(
        resumed.hasher.encode(fit.queries), fit.hasher.encode(fit.queries)
    )


def acg_ndcg(fit: ToyFit, q_codes: np.ndarray, db_codes: np.ndarray) -> tuple[float, float]:
    metrics, _ = evaluate(
        pack_codes(q_codes),
        pack_codes(db_codes),
        fit.query_anc,
        fit.pairs.ancestors,
        [q_codes.shape[1]],
        [1.0],
        n=TOP_N,
        wr_ns=(TOP_N,),
        curve_max=TOP_N,
    )
    return metrics[f"acg@{TOP_N}"], metrics[f"ndcg@{TOP_N}"]


def scores_and_chance(fit: ToyFit) -> tuple[tuple[float, float], tuple[float, float]]:
    """(ACG@50, NDCG@50) of the fit's codes for the toy queries, and of seeded random codes."""
    q_codes, db_codes = fit.hasher.encode(fit.queries), fit.hasher.encode(fit.images)
    rng = np.random.default_rng(0)
    random_q = np.where(rng.random(q_codes.shape) < 0.5, 1, -1).astype(np.int8)
    random_db = np.where(rng.random(db_codes.shape) < 0.5, 1, -1).astype(np.int8)
    return acg_ndcg(fit, q_codes, db_codes), acg_ndcg(fit, random_q, random_db)


def assert_ranks_above_chance(fit: ToyFit, acg_gain: float, ndcg_gain: float = 0.2) -> None:
    """The fit's ACG@50 and NDCG@50 above seeded random codes' by at least the gains."""
    (acg, ndcg), (acg_random, ndcg_random) = scores_and_chance(fit)
    assert acg > acg_random + acg_gain, (acg, acg_random)
    assert ndcg > ndcg_random + ndcg_gain, (ndcg, ndcg_random)
