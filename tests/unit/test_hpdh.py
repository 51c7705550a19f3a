"""HPDH's own behaviour: its loss on the brief's toy batch with the centres its epoch-end update
makes, the centres' start and update (class means, parents as their children's mean, no NaN for a
class no item reached), items labelled at an inner node, the rho rule, the centres restored on
resume, learning the toy tree, and the inputs it refuses. The common contract is
test_hashers_contract.py's."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from shdh.hashers.hpdh import HPDH, HPDHObjective, filled_ancestors, level_rhos
from shdh.hashers.method_settings import HPDHSettings
from tests.unit.centre_toys import (
    TOY_ANC,
    TOY_U,
    assert_ranks_above_chance,
    fit_toy,
    resumes_to_the_same_codes,
    toy_pairs,
    toy_task,
)
from tests.unit.toys import TINY_NET, deep_hasher, tree_set

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _after_one_epoch(**settings) -> HPDHObjective:
    """The objective once an epoch of the toy batch has gone through forward and end_epoch: the
    brief's centres (fine: class means, coarse: means of their children's)."""
    objective = HPDHObjective(HPDHSettings(**settings), toy_task())
    objective(TOY_U, TOY_ANC)
    objective.end_epoch()
    return objective


def test_epoch_end_centres_are_class_means_and_their_parents_means() -> None:
    objective = _after_one_epoch()
    fine = torch.stack([TOY_U[:2].mean(0), TOY_U[2], TOY_U[3]])
    torch.testing.assert_close(objective.centres(3), fine)
    torch.testing.assert_close(objective.centres(2), torch.stack([fine[:2].mean(0), fine[2]]))
    assert float(objective.counts.sum()) == 0 and float(objective.sums.abs().sum()) == 0


@pytest.mark.parametrize(
    ("settings", "expected"),
    [({}, 1.007166), ({"reduction": "sum"}, 4 * 1.007166)],
)
def test_loss_on_the_toy_batch(settings, expected) -> None:
    """rho = (1, 0.5) for (fine, coarse): the rule's values for a K = 3 tree."""
    objective = _after_one_epoch(**settings)
    assert objective.rhos == [0.5, 1.0]  # coarsest first
    loss, parts = objective(TOY_U, TOY_ANC)
    scale = 4 if settings else 1
    assert loss.item() == pytest.approx(expected, abs=1e-5)
    assert float(parts["e1"]) == pytest.approx(scale * (0.487761 + 0.483655), abs=1e-5)
    assert float(parts["e2"]) == pytest.approx(scale * (10 * 0 + 0.1 * 1.43) / 4, abs=1e-5)


def test_the_first_epoch_trains_against_a_seeded_draw() -> None:
    one = HPDHObjective(HPDHSettings(), toy_task(seed=1))
    again = HPDHObjective(HPDHSettings(), toy_task(seed=1))
    other = HPDHObjective(HPDHSettings(), toy_task(seed=2))
    for level in (2, 3):
        torch.testing.assert_close(one.centres(level), again.centres(level))
        assert not torch.equal(one.centres(level), other.centres(level))
    assert one.centres(2).shape == (2, 4) and one.centres(3).shape == (3, 4)
    assert sorted(one.state_dict()) == ["centres2", "centres3", "counts", "sums"]


def test_a_class_no_item_reached_keeps_its_centre() -> None:
    objective = HPDHObjective(HPDHSettings(), toy_task())
    start = objective.centres(3).clone()
    objective(TOY_U[:3], TOY_ANC[:3])  # fine class 2 (item 4) not seen this epoch
    objective.end_epoch()
    fine = objective.centres(3)
    assert torch.isfinite(fine).all() and torch.isfinite(objective.centres(2)).all()
    torch.testing.assert_close(fine[2], start[2])
    torch.testing.assert_close(objective.centres(2)[1], start[2])  # its parent: its only child


def test_an_item_labelled_at_an_inner_node_is_its_own_leaf_below() -> None:
    anc = torch.tensor([[0, 1, 3], [0, 1, 4], [0, 2, -1]])  # item 3: coarse class 2 only
    np.testing.assert_array_equal(filled_ancestors(anc)[2], [0, 2, 2])
    objective = HPDHObjective(HPDHSettings(), toy_task(anc))
    assert objective.centres(3).shape == (3, 4)  # the inner node 2 and the leaves 3, 4
    u = TOY_U[:3]
    objective(u, anc)
    objective.end_epoch()
    own = int(objective.lookup3[2])  # node 2's row at the finest level
    torch.testing.assert_close(objective.centres(3)[own], u[2])
    torch.testing.assert_close(objective.centres(2)[int(objective.lookup2[2])], u[2])


def test_rho_runs_from_the_coarsest_level_to_the_finest() -> None:
    assert level_rhos(3, 1.0, 0.5) == [0.5, 1.0]  # the authors' CIFAR-100 values
    assert level_rhos(4, 1.0, 0.5) == [0.5, 0.75, 1.0]  # Fashion-MNIST-H's three levels
    assert level_rhos(5, 1.0, 0.25) == [0.25, 0.5, 0.75, 1.0]  # NABirds: 0.25, 0.5, 0.67, 1
    assert level_rhos(2, 1.0, 0.5) == [1.0]


# HPDH's centres follow the network one epoch behind, so the toy tree wants more, gentler epochs
# than the other methods' budget: at lr 0.05 the first epoch's class means all but coincide, and
# a Gaussian model of coinciding centres gives the outputs no gradient to part them again.
HPDH_BUDGET = {"epochs": 6, "lr": 0.01}


@pytest.fixture(scope="module")
def toy_fit(tmp_path_factory):
    return fit_toy(HPDH, tmp_path_factory.mktemp("hpdh"), **HPDH_BUDGET)


def test_learns_the_toy_tree(toy_fit) -> None:
    assert_ranks_above_chance(toy_fit, acg_gain=0.6)
    assert all(np.isfinite(entry["e1"]) for entry in toy_fit.hasher.history_)


def test_resume_continues_from_the_epoch_end_centres(toy_fit, tmp_path) -> None:
    """The centres of the interrupted fit's last epoch come back from the checkpoint (not the
    seeded first-epoch draw), so the resumed fit ends as the uninterrupted one."""
    resumes_to_the_same_codes(HPDH, toy_fit, tmp_path, **HPDH_BUDGET)


def test_multi_label_data_and_broken_paths_are_refused_by_name() -> None:
    _, images, anc = tree_set(seed=1, per_leaf=2)
    sets = np.stack([anc, anc], axis=2)  # (N, K, 2)
    hasher = deep_hasher(HPDH, n_bits=8, **TINY_NET)
    with pytest.raises(ValueError, match=r"^hpdh: needs one label per item.*multi-label"):
        hasher.fit(images, toy_pairs(HPDH, sets))
    broken = anc.copy()
    broken[4, :2] = -1  # a leaf with no path above it
    with pytest.raises(ValueError, match=r"^hpdh: ancestors row 4 has a node below levels"):
        hasher.fit(images, toy_pairs(HPDH, broken))
    assert not hasher.is_fitted()


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"rho_finest": 0.0}, r"HPDHSettings\.rho_finest must be a number > 0, got 0\.0"),
        ({"rho_coarsest": -1}, r"HPDHSettings\.rho_coarsest must be a number > 0"),
        ({"w_cub": -10.0}, r"HPDHSettings\.w_cub must be a number >= 0"),
        ({"w_vert": None}, r"HPDHSettings\.w_vert must be a number >= 0"),
        ({"rho": [1, 0.5]}, r"settings: unknown settings \['rho'\]"),
    ],
)
def test_bad_settings_are_refused_by_name(settings, message) -> None:
    with pytest.raises(ValueError, match="^hpdh: " + message):
        HPDH(n_bits=8, settings=settings)
    assert HPDH(n_bits=8).settings == HPDHSettings(rho_finest=1.0, rho_coarsest=0.5)
