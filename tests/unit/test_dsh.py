"""DSH's own behaviour: its loss on the research brief's toy batch, a tiny fit that retrieves
better than random codes, and bad input refused by name. The common contract is
test_hashers_contract.py's."""

from __future__ import annotations

import numpy as np
import pytest

from shdh.core.level_weights import layer_weights
from shdh.hashers.dsh import DSH, DSHObjective, dsh_loss
from shdh.hashers.method_settings import DSHSettings
from shdh.hashers.supervision import PairSimilarity
from shdh.training.objective import Task
from tests.unit.pair_toys import ANC, U, fit_and_score, sets_of
from tests.unit.toys import TINY_NET, TREE, deep_hasher, tree_set

pytestmark = pytest.mark.usefixtures("one_torch_thread")

BUDGET = {"epochs": 3}  # the contract test's budget for DSH: TINY_NET and these


def test_brief_worked_example() -> None:
    """Fine-level s, m = 8 = 2K, alpha = 0.01. The brief's pair terms average 2.373333. Its total
    2.395833 adds alpha times the mean per-item pull (2.25); the paper's pair loss has the pull
    of both members of each pair, alpha (R_i + R_j), as weixu000/DSH-pytorch's `* 2`, so over the
    pairs it is 2 alpha mean_i R_i = 0.045 and the loss 2.418333."""
    loss, parts = dsh_loss(U, ANC, margin=8.0, alpha=0.01, reduction="mean")
    assert float(parts["e1"]) == pytest.approx(2.373333, abs=1e-5)
    assert float(parts["e2"]) == pytest.approx(2 * 0.01 * 2.25, abs=1e-5)
    assert float(parts["e1"] + parts["e2"] / 2) == pytest.approx(2.395833, abs=1e-5)  # brief's
    assert float(loss) == pytest.approx(2.418333, abs=1e-5)


def test_sum_is_the_mean_over_each_anchors_partners() -> None:
    _, mean = dsh_loss(U, ANC, margin=8.0, reduction="mean")
    _, total = dsh_loss(U, ANC, margin=8.0, reduction="sum")
    for key in ("e1", "e2"):  # both terms: alpha keeps the paper's balance
        assert float(total[key]) == pytest.approx(3 * float(mean[key]))


def test_default_margin_is_twice_the_bits() -> None:
    task = Task((4,), (3,), tuple(layer_weights(3)), ANC.numpy())
    objective = DSHObjective(DSHSettings(reduction="mean"), task)
    loss, _ = objective(U, ANC)
    assert objective.terms["margin"] == 8.0
    assert float(loss) == pytest.approx(2.418333, abs=1e-5)


def test_ancestor_sets_share_a_label_when_their_finest_sets_intersect() -> None:
    single, _ = dsh_loss(U, ANC, margin=8.0)
    as_sets, _ = dsh_loss(U, sets_of(ANC), margin=8.0)
    assert float(as_sets) == pytest.approx(float(single))
    # item 3 also carries item 1's fine class: pairs (1, 3) and (2, 3) become similar
    sets = sets_of(ANC)
    sets[2, :, 1] = ANC[0]
    both, _ = dsh_loss(U, sets, margin=8.0)
    assert float(both) != pytest.approx(float(single))


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    return fit_and_score("dsh", tmp_path_factory.mktemp("dsh"), **BUDGET)


def test_a_tiny_fit_retrieves_better_than_random_codes(scored) -> None:
    assert scored.acg > scored.random_acg + 0.6, (scored.acg, scored.random_acg)
    assert scored.ndcg > scored.random_ndcg + 0.1, (scored.ndcg, scored.random_ndcg)
    assert all(np.isfinite(e["e1"]) and np.isfinite(e["e2"]) for e in scored.hasher.history_)


def test_bad_settings_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"dsh: DSHSettings\.margin .*null or a number > 0"):
        DSH(n_bits=16, settings={"margin": 0})
    with pytest.raises(ValueError, match=r"dsh: DSHSettings\.alpha .*a number >= 0"):
        DSH(n_bits=16, settings={"alpha": -0.1})
    with pytest.raises(ValueError, match="needs margin > 0"):
        dsh_loss(U, ANC, margin=0.0)
    with pytest.raises(ValueError, match="reduction must be one of"):
        dsh_loss(U, ANC, margin=8.0, reduction="median")
    with pytest.raises(ValueError, match=r"z must be \(B, L\) with B >= 2"):
        dsh_loss(U[:1], ANC[:1], margin=8.0)


def test_items_without_a_label_are_refused_before_training() -> None:
    _, images, anc = tree_set(seed=1, per_leaf=2)
    anc = anc.copy()
    anc[3] = -1
    hasher = deep_hasher(DSH, n_bits=16, **TINY_NET)
    with pytest.raises(ValueError, match="dsh: ancestors has a row with no node"):
        hasher.fit(images, PairSimilarity(anc, layer_weights(TREE.height), "label"))
    assert not hasher.is_fitted()
