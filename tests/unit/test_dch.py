"""DCH's own behaviour: the Cauchy cross-entropy and quantisation on the research brief's toy
batch, the clamp on the distance, a tiny fit that retrieves better than random codes, and bad
input refused by name. The common contract is test_hashers_contract.py's."""

from __future__ import annotations

import pytest
import torch

from shdh.core.level_weights import layer_weights
from shdh.hashers.dch import DCH, DCHObjective, dch_loss
from shdh.hashers.method_settings import DCHSettings
from shdh.hashers.supervision import PairSimilarity
from shdh.training.objective import Task
from tests.unit.pair_toys import ANC, U, fit_and_score, sets_of
from tests.unit.toys import TINY_NET, TREE, deep_hasher, tree_set

pytestmark = pytest.mark.usefixtures("one_torch_thread")

BUDGET = {"epochs": 3}  # the contract test's budget for DCH: TINY_NET and these


@pytest.mark.parametrize(
    ("gamma", "cauchy", "quantisation", "total"),
    [(20.0, 2.166666, 0.008598, 2.167526), (2.0, 0.624794, 0.082707, 0.633065)],
)
def test_brief_worked_examples(gamma, cauchy, quantisation, total) -> None:
    """Ordered pairs i != j, lambda = 0.1, the paper's mean form (the brief's 2.164631 is
    DeepHash-pytorch's, which also averages the diagonal's self-pairs)."""
    loss, parts = dch_loss(U, ANC, gamma=gamma, lam=0.1, reduction="mean")
    assert float(parts["e1"]) == pytest.approx(cauchy, abs=1e-5)
    assert float(parts["e2"]) == pytest.approx(0.1 * quantisation, abs=1e-5)
    assert float(loss) == pytest.approx(total, abs=1e-5)


def test_pair_terms_are_the_cauchy_cross_entropy() -> None:
    """The similar pair's log(1 + d/gamma) and a dissimilar pair's log(1 + gamma/d) are Eq. 8's
    s log(d/gamma) + log(1 + gamma/d), with the brief's d_12 = 0.107134."""
    d12, d34, gamma = 0.107134, 3.542559, 20.0
    rows = [0, 1]
    loss, _ = dch_loss(U[rows], ANC[rows], gamma=gamma, lam=0.0, reduction="mean")
    literal = torch.log(torch.tensor(d12 / gamma)) + torch.log1p(torch.tensor(gamma / d12))
    assert float(loss) == pytest.approx(float(literal), abs=1e-5)
    rows = [2, 3]
    loss, _ = dch_loss(U[rows], ANC[rows], gamma=gamma, lam=0.0, reduction="mean")
    assert float(loss) == pytest.approx(float(torch.log1p(torch.tensor(gamma / d34))), abs=1e-5)


def test_identical_directions_stay_finite() -> None:
    """A dissimilar pair pointing the same way: d is clamped at 0.005 L, not 0."""
    z = torch.tensor([[1.0, 2.0, -1.0, 0.5], [2.0, 4.0, -2.0, 1.0]], requires_grad=True)
    loss, _ = dch_loss(z, ANC[[0, 3]], gamma=20.0, lam=0.0, reduction="mean")
    expected = float(torch.log1p(torch.tensor(20.0 / 0.02)))  # d = 0.005 L = 0.02
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-5)
    loss.backward()
    assert torch.isfinite(z.grad).all()
    zero, _ = dch_loss(torch.zeros(2, 4), ANC[[0, 3]])  # u = 0 has no direction: still finite
    assert torch.isfinite(zero)


def test_sum_keeps_the_balance_and_ancestor_sets_match() -> None:
    _, mean = dch_loss(U, ANC, reduction="mean")
    _, total = dch_loss(U, ANC, reduction="sum")
    for key in ("e1", "e2"):  # both terms scale by B - 1: lambda keeps its meaning
        assert float(total[key]) == pytest.approx(3 * float(mean[key]))
    _, as_sets = dch_loss(U, sets_of(ANC), reduction="mean")
    assert float(as_sets["e1"]) == pytest.approx(float(mean["e1"]), abs=1e-12)


def test_objective_takes_its_settings() -> None:
    task = Task((4,), (3,), tuple(layer_weights(3)), ANC.numpy())
    loss, _ = DCHObjective(DCHSettings(reduction="mean"), task)(U, ANC)
    assert float(loss) == pytest.approx(2.167526, abs=1e-5)


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    return fit_and_score("dch", tmp_path_factory.mktemp("dch"), **BUDGET)


def test_a_tiny_fit_retrieves_better_than_random_codes(scored) -> None:
    assert scored.acg > scored.random_acg + 0.8, (scored.acg, scored.random_acg)
    assert scored.ndcg > scored.random_ndcg + 0.1, (scored.ndcg, scored.random_ndcg)


def test_bad_settings_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"dch: DCHSettings\.gamma .*a number > 0"):
        DCH(n_bits=16, settings={"gamma": 0.0})
    with pytest.raises(ValueError, match=r"dch: DCHSettings\.lam .*a number >= 0"):
        DCH(n_bits=16, settings={"lam": -1.0})
    with pytest.raises(ValueError, match="needs gamma > 0"):
        dch_loss(U, ANC, gamma=0.0)
    with pytest.raises(ValueError, match="reduction must be one of"):
        dch_loss(U, ANC, reduction="median")


def test_items_without_a_label_are_refused_before_training() -> None:
    _, images, anc = tree_set(seed=1, per_leaf=2)
    anc = anc.copy()
    anc[5] = -1
    hasher = deep_hasher(DCH, n_bits=16, **TINY_NET)
    with pytest.raises(ValueError, match="dch: ancestors has a row with no node"):
        hasher.fit(images, PairSimilarity(anc, layer_weights(TREE.height), "label"))
    assert not hasher.is_fitted()
