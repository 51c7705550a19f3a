"""HashNet's and HashNet+H's own behaviour: the weighted likelihood on the research brief's toy
batch, the guard for batches of one kind of pair, the continuation schedule kept in the
checkpoint and resumed, tiny fits that retrieve better than random codes, and bad input refused
by name. The common contract is test_hashers_contract.py's."""

from __future__ import annotations

import math
import shutil

import numpy as np
import pytest
import torch

from shdh.core.level_weights import layer_weights
from shdh.hashers.hashnet import (
    HashNet,
    HashNetHObjective,
    HashNetObjective,
    continuation_beta,
    hashnet_loss,
)
from shdh.hashers.method_settings import HashNetSettings
from shdh.hashers.supervision import PairSimilarity
from shdh.training.checkpoint import CHECKPOINT_NAME
from shdh.training.objective import Task
from tests.unit.pair_toys import ANC, FRACTION_OF_LEVELS, U, fit_and_score, sets_of
from tests.unit.toys import TINY_NET, TREE, deep_hasher, tree_set

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TOY_TASK = Task((4,), (3,), tuple(layer_weights(3)), ANC.numpy())


@pytest.mark.parametrize(
    ("beta", "alpha", "expected"),
    [(1.0, 1.0, 0.960904), (2.0, 1.0, 0.602249), (1.0, 2.5, 0.594058)],  # 2.5 = 10 / K
)
def test_brief_worked_examples(beta: float, alpha: float, expected: float) -> None:
    """Fine-level s over the ordered pairs i != j (the brief's 0.975076 keeps the diagonal,
    whose self-pairs carry no label information)."""
    loss, parts = hashnet_loss(U, ANC, alpha=alpha, beta=beta, reduction="mean")
    assert float(loss) == pytest.approx(expected, abs=1e-5)
    assert float(parts["beta"]) == beta


def test_the_weighted_likelihood_is_the_mean_of_each_kind() -> None:
    """(1/|S|) sum w_ij l_ij with |S|/|S1|, |S|/|S0| is mean over S1 + mean over S0: the brief's
    0.369426 (the one similar pair) and 0.591477 (the ten dissimilar ordered pairs)."""
    h = torch.tanh(U)
    theta = h @ h.T
    s = (ANC[:, 2, None] == ANC[None, :, 2]).double()  # only (1, 2) share their fine class
    nll = torch.nn.functional.softplus(theta) - s * theta
    similar_mean = float(nll[0, 1])
    off = ~torch.eye(4, dtype=torch.bool)
    off[0, 1] = off[1, 0] = False
    dissimilar_mean = float(nll[off].mean())
    assert similar_mean == pytest.approx(0.369426, abs=1e-5)
    assert dissimilar_mean == pytest.approx(0.591477, abs=1e-5)
    loss, _ = hashnet_loss(U, ANC, alpha=1.0, reduction="mean")
    assert float(loss) == pytest.approx(similar_mean + dissimilar_mean, abs=1e-12)


def test_hashnet_h_against_the_brief_soft_similarity() -> None:
    """The brief's HashNet-H: s = fraction of shared levels, positive = s > 0, beta = alpha = 1:
    positive mean 0.587861 + negative mean 0.577752 = 1.165613."""
    loss, _ = hashnet_loss(U, ANC, alpha=1.0, reduction="mean", layer_weights=FRACTION_OF_LEVELS)
    assert float(loss) == pytest.approx(1.165613, abs=1e-5)


def test_hashnet_h_with_only_the_finest_level_is_hashnet() -> None:
    plain, _ = hashnet_loss(U, ANC, alpha=1.0)
    finest_only, _ = hashnet_loss(U, ANC, alpha=1.0, layer_weights=(0.0, 0.0, 1.0))
    assert float(finest_only) == pytest.approx(float(plain), abs=1e-12)
    shdh_weights, _ = hashnet_loss(U, ANC, alpha=1.0, layer_weights=layer_weights(3))
    assert float(shdh_weights) != pytest.approx(float(plain))


@pytest.mark.parametrize("rows", [[0, 1], [0, 2, 3]])
def test_a_batch_of_one_kind_of_pair_is_its_plain_mean(rows: list[int]) -> None:
    """All similar (0, 1) or all dissimilar (0, 2, 3): no division by an empty |S1| or |S0|."""
    loss, _ = hashnet_loss(U[rows], ANC[rows], alpha=1.0, reduction="mean")
    h = torch.tanh(U[rows])
    theta = h @ h.T
    s = 1.0 if rows == [0, 1] else 0.0
    off = ~torch.eye(len(rows), dtype=torch.bool)
    expected = (torch.nn.functional.softplus(theta) - s * theta)[off].mean()
    assert torch.isfinite(loss) and float(loss) == pytest.approx(float(expected), abs=1e-12)


def test_stable_for_large_logits() -> None:
    z = torch.full((2, 200), 50.0)  # tanh = 1: theta = alpha * 200 = 20,000
    similar, _ = hashnet_loss(z, ANC[[0, 1]], alpha=100.0, reduction="mean")
    dissimilar, _ = hashnet_loss(z, ANC[[0, 3]], alpha=100.0, reduction="mean")
    assert float(similar) == pytest.approx(0.0, abs=1e-3)
    assert float(dissimilar) == pytest.approx(20000.0, rel=1e-6)


def test_sum_and_ancestor_sets() -> None:
    mean, _ = hashnet_loss(U, ANC, alpha=1.0, reduction="mean")
    total, _ = hashnet_loss(U, ANC, alpha=1.0, reduction="sum")
    assert float(total) == pytest.approx(3 * float(mean))  # B - 1 partners per anchor
    as_sets, _ = hashnet_loss(U, sets_of(ANC), alpha=1.0, reduction="mean")
    assert float(as_sets) == pytest.approx(float(mean), abs=1e-12)


def test_objective_defaults_and_schedule() -> None:
    objective = HashNetObjective(HashNetSettings(reduction="mean"), TOY_TASK)
    assert objective.terms["alpha"] == pytest.approx(10 / 4)
    loss, _ = objective(U, ANC)
    assert float(loss) == pytest.approx(0.594058, abs=1e-5)  # beta = 1 before any epoch
    beta = objective.beta
    objective.start_epoch(3)
    assert objective.beta is beta  # in place: a captured CUDA graph reads the same memory
    assert float(beta) == pytest.approx(math.sqrt(1 + 2 * 1.39))
    assert "beta" in objective.state_dict()  # kept in every checkpoint
    assert continuation_beta(1, 1.39) == 1.0
    hier = HashNetHObjective(HashNetSettings(), TOY_TASK)
    assert hier.terms["layer_weights"] == TOY_TASK.layer_weights


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    """HashNet at the contract's budget (TINY_NET: one epoch), in a work folder the resume test
    continues from."""
    return fit_and_score("hashnet", tmp_path_factory.mktemp("hashnet"))


def test_a_tiny_fit_retrieves_better_than_random_codes(scored) -> None:
    assert scored.acg > scored.random_acg + 0.8, (scored.acg, scored.random_acg)
    assert scored.ndcg > scored.random_ndcg + 0.1, (scored.ndcg, scored.random_ndcg)
    assert [e["beta"] for e in scored.hasher.history_] == [1.0]


def test_hashnet_h_tiny_fit_retrieves_better_than_random_codes(tmp_path) -> None:
    scored = fit_and_score("hashnet+h", tmp_path)
    assert scored.acg > scored.random_acg + 0.7, (scored.acg, scored.random_acg)
    assert scored.ndcg > scored.random_ndcg + 0.1, (scored.ndcg, scored.random_ndcg)


def test_resume_continues_the_continuation(scored, tmp_path) -> None:
    """One epoch, then resumed to two, is the uninterrupted two-epoch fit: beta comes back from
    the checkpoint and the schedule goes on."""
    _, X, anc = tree_set(seed=1, per_leaf=40)
    _, Q, _ = tree_set(seed=2, per_leaf=10)
    pairs = PairSimilarity(anc, layer_weights(TREE.height), "label")
    work = tmp_path / "resumed"
    shutil.copytree(scored.hasher.work_dir, work)
    params = {**TINY_NET, "epochs": 2, "n_bits": 16, "seed": 7}
    resumed = deep_hasher(HashNet, work_dir=str(work), **params).fit(X, pairs, resume="always")
    whole = deep_hasher(HashNet, work_dir=str(tmp_path / "whole"), **params).fit(X, pairs)
    # epoch 1 was not retrained (HashNet has no e2: NaN there, which assert_equal matches)
    np.testing.assert_equal(resumed.history_[0], scored.hasher.history_[0])
    assert [e["beta"] for e in whole.history_] == pytest.approx([1.0, math.sqrt(2.39)])
    assert [e["beta"] for e in resumed.history_] == [e["beta"] for e in whole.history_]
    np.testing.assert_array_equal(resumed.encode(Q), whole.encode(Q))
    saved = torch.load(work / CHECKPOINT_NAME, weights_only=False)
    assert float(saved["objective"]["beta"]) == pytest.approx(math.sqrt(2.39))


def test_bad_settings_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"hashnet: HashNetSettings\.alpha .*null or a number > 0"):
        HashNet(n_bits=16, settings={"alpha": 0})
    with pytest.raises(ValueError, match=r"hashnet: HashNetSettings\.beta_growth .*>= 0"):
        HashNet(n_bits=16, settings={"beta_growth": -1.0})
    with pytest.raises(ValueError, match="alpha must be > 0"):
        hashnet_loss(U, ANC, alpha=0.0)
    with pytest.raises(ValueError, match="reduction must be one of"):
        hashnet_loss(U, ANC, alpha=1.0, reduction="median")
    with pytest.raises(ValueError, match=r"anc has 3 rows but z has 4"):
        hashnet_loss(U, ANC[:3], alpha=1.0)


def test_items_without_a_label_are_refused_before_training() -> None:
    _, images, anc = tree_set(seed=1, per_leaf=2)
    anc = anc.copy()
    anc[0] = -1
    hasher = deep_hasher(HashNet, n_bits=16, **TINY_NET)
    with pytest.raises(ValueError, match="hashnet: ancestors has a row with no node"):
        hasher.fit(images, PairSimilarity(anc, layer_weights(TREE.height), "label"))
    assert not hasher.is_fitted()
