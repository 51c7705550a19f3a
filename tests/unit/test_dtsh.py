"""DTSH's own behaviour: the triplet likelihood on the research brief's toy batch, anchors never
their own positives, a tiny fit that retrieves better than random codes, and bad input refused by
name. The common contract is test_hashers_contract.py's."""

from __future__ import annotations

import math

import pytest
import torch

from shdh.core.level_weights import layer_weights
from shdh.hashers.dtsh import DTSH, DTSHObjective, dtsh_loss
from shdh.hashers.method_settings import DTSHSettings
from shdh.hashers.supervision import PairSimilarity
from shdh.training.objective import Task
from tests.unit.pair_toys import ANC, U, fit_and_score, sets_of
from tests.unit.toys import TINY_NET, TREE, deep_hasher, tree_set

pytestmark = pytest.mark.usefixtures("one_torch_thread")

N_TRIPLETS = 4  # (1,2,3), (1,2,4), (2,1,3), (2,1,4): anchors 3 and 4 have no positive
QUANT_SUM = 5.72  # sum_i ||u_i - sgn(u_i)||^2 = 16 x the brief's element mean 0.3575


def test_brief_worked_example() -> None:
    """theta = <u_i, u_j>/2, alpha = K/2 = 2: the brief's triplet mean 1.608509. The paper's
    quantisation term is a sum over items, scaled here as the triplets are (its balance kept),
    lambda sum_i ||u_i - b_i||^2 / n_triplets; the brief's total 1.966009 takes lambda = 1 on the
    element mean (0.3575) instead."""
    loss, parts = dtsh_loss(U, ANC, margin=2.0, lam=1.0, reduction="mean")
    assert float(parts["e1"]) == pytest.approx(1.608509, abs=1e-5)
    assert float(parts["e2"]) == pytest.approx(QUANT_SUM / N_TRIPLETS, abs=1e-12)
    element_mean = float(parts["e2"]) * N_TRIPLETS / U.numel()
    assert element_mean == pytest.approx(0.3575, abs=1e-12)
    assert float(parts["e1"]) + element_mean == pytest.approx(1.966009, abs=1e-5)  # brief's


def test_no_anchor_is_its_own_positive() -> None:
    """DeepHash-pytorch's form (theta = <u_i, u_j> without the 1/2, alpha = 5) through the same
    loss, with u scaled by sqrt(2): 3.792849 over the four true triplets. Counting every anchor
    as its own positive, as that code does, would give 4.209342 - 0.3575."""
    _, parts = dtsh_loss(U * math.sqrt(2.0), ANC, margin=5.0, lam=0.0, reduction="mean")
    assert float(parts["e1"]) == pytest.approx(3.792849, abs=1e-5)
    assert float(parts["e1"]) != pytest.approx(4.209342 - 0.3575, abs=1e-3)


def test_triplet_terms_one_by_one() -> None:
    """The brief's table: (1,2,3) has gap -1.405 and loss log(1 + e^1.405) = 1.624430."""
    loss, _ = dtsh_loss(U[[0, 1, 2]], ANC[[0, 1, 2]], margin=2.0, lam=0.0, reduction="mean")
    assert float(loss) == pytest.approx((1.624430 + 1.580509) / 2, abs=1e-5)
    assert math.log1p(math.exp(1.405)) == pytest.approx(1.624430, abs=1e-6)


def test_sum_and_a_batch_without_triplets() -> None:
    three = [0, 1, 2]  # B = 3 and 2 triplets: (1,2,3), (2,1,3)
    _, mean = dtsh_loss(U[three], ANC[three], margin=2.0, reduction="mean")
    _, total = dtsh_loss(U[three], ANC[three], margin=2.0, reduction="sum")
    for key in ("e1", "e2"):  # one factor for both terms: n_triplets / B
        assert float(total[key]) == pytest.approx(float(mean[key]) * 2 / 3)
    rows = [0, 2, 3]  # no two items share a label: no triplet, the quantisation term alone
    loss, parts = dtsh_loss(U[rows], ANC[rows], margin=2.0, lam=1.0, reduction="mean")
    assert float(parts["e1"]) == 0.0 and torch.isfinite(loss)


def test_ancestor_sets_and_gradients() -> None:
    z = U.clone().requires_grad_(True)
    single, _ = dtsh_loss(z, ANC, margin=2.0)
    as_sets, _ = dtsh_loss(U, sets_of(ANC), margin=2.0)
    assert float(as_sets) == pytest.approx(float(single.detach()), abs=1e-12)
    single.backward()
    assert (z.grad[2:].abs().sum(1) > 0).all()  # negatives get gradient too, not only anchors


def test_objective_defaults() -> None:
    task = Task((4,), (3,), tuple(layer_weights(3)), ANC.numpy())
    objective = DTSHObjective(DTSHSettings(lam=1.0, reduction="mean"), task)
    assert objective.terms["margin"] == 2.0  # L / 2
    _, parts = objective(U, ANC)
    assert float(parts["e1"]) == pytest.approx(1.608509, abs=1e-5)


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    return fit_and_score("dtsh", tmp_path_factory.mktemp("dtsh"))  # TINY_NET: one epoch


def test_a_tiny_fit_retrieves_better_than_random_codes(scored) -> None:
    assert scored.acg > scored.random_acg + 0.8, (scored.acg, scored.random_acg)
    assert scored.ndcg > scored.random_ndcg + 0.1, (scored.ndcg, scored.random_ndcg)


def test_bad_settings_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"dtsh: DTSHSettings\.margin .*null or a number >= 0"):
        DTSH(n_bits=16, settings={"margin": -1.0})
    with pytest.raises(ValueError, match=r"dtsh: DTSHSettings\.lam .*a number >= 0"):
        DTSH(n_bits=16, settings={"lam": float("nan")})
    with pytest.raises(ValueError, match="needs margin >= 0"):
        dtsh_loss(U, ANC, margin=-1.0)
    with pytest.raises(ValueError, match="reduction must be one of"):
        dtsh_loss(U, ANC, margin=2.0, reduction="median")


def test_items_without_a_label_are_refused_before_training() -> None:
    _, images, anc = tree_set(seed=1, per_leaf=2)
    anc = anc.copy()
    anc[1] = -1
    hasher = deep_hasher(DTSH, n_bits=16, **TINY_NET)
    with pytest.raises(ValueError, match="dtsh: ancestors has a row with no node"):
        hasher.fit(images, PairSimilarity(anc, layer_weights(TREE.height), "label"))
    assert not hasher.is_fitted()
