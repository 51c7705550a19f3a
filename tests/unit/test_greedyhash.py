"""GreedyHash's own behaviour: its loss and straight-through gradient on the brief's toy batch,
its classifier as a trained parameter kept in the checkpoint (and restored on resume), learning
the toy tree, and the inputs it refuses. The common contract is test_hashers_contract.py's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from shdh.hashers.greedyhash import GreedyHash, GreedyHashObjective, GreedySign, greedyhash_loss
from shdh.hashers.method_settings import GreedyHashSettings
from shdh.training.checkpoint import CHECKPOINT_NAME
from tests.unit.centre_toys import (
    TOY_ANC,
    TOY_U,
    assert_ranks_above_chance,
    fit_task,
    fit_toy,
    resumes_to_the_same_codes,
    toy_pairs,
    toy_task,
)
from tests.unit.toys import TINY_NET, deep_hasher, tree_set

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# The brief's classifier: one row per bit, one column per class.
TOY_W = torch.tensor([[1.0, 0, -1], [-1, 1, 0], [0.5, -0.5, 0.5], [0, 1, -1]])


def _objective(**settings) -> GreedyHashObjective:
    objective = GreedyHashObjective(GreedyHashSettings(**settings), toy_task())
    with torch.no_grad():
        objective.weight.copy_(TOY_W)
    return objective


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"alpha": 0.1}, 0.104575),
        ({"alpha": 1.0}, 0.326650),
        ({"alpha": 0.1, "reduction": "sum"}, 4 * 0.104575),  # summed over the 4 items
    ],
)
def test_loss_on_the_toy_batch(settings, expected) -> None:
    loss, parts = _objective(**settings)(TOY_U, TOY_ANC)
    assert loss.item() == pytest.approx(expected, abs=1e-5)
    scale = 4 if settings.get("reduction") == "sum" else 1
    assert float(parts["e1"]) == pytest.approx(scale * 0.079900, abs=1e-5)  # mean CE
    assert float(parts["e2"]) == pytest.approx(scale * settings["alpha"] * 0.246750, abs=1e-5)
    assert float(parts["accuracy"]) == 1.0


def test_straight_through_gradient() -> None:
    """dL/dh = dL/db (no clipping), the brief's numbers for item 1 at alpha = 0.1."""
    h = TOY_U.clone().requires_grad_()
    _objective(alpha=0.1)(h, TOY_ANC)[0].backward()
    expected = torch.tensor([-0.024915, 0.032281, -0.012403, -0.007821])
    torch.testing.assert_close(h.grad[0], expected, atol=1e-5, rtol=0)
    # Its cross-entropy part is the gradient with respect to the codes b themselves.
    b = torch.where(TOY_U > 0, 1.0, -1.0).requires_grad_()
    F.cross_entropy(b @ TOY_W, TOY_ANC[:, -1] - 3).backward()
    h = TOY_U.clone().requires_grad_()
    greedyhash_loss(h, TOY_ANC[:, -1] - 3, TOY_W, alpha=0.0)[0].backward()
    expected_ce = torch.tensor([-0.020227, 0.027593, -0.011653, 0.007366])
    torch.testing.assert_close(b.grad[0], expected_ce, atol=1e-5, rtol=0)
    torch.testing.assert_close(h.grad, b.grad)


def test_the_sign_is_the_codes_sign() -> None:
    """sgn(0) = -1 in training as in the codes file, and the backward is the identity even far
    outside [-1, 1] (the clipped straight-through estimator would zero it there)."""
    h = torch.tensor([-3.0, 0.0, 0.2, 5.0], requires_grad=True)
    b = GreedySign.apply(h)
    assert b.tolist() == [-1.0, -1.0, 1.0, 1.0]
    (b * torch.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    assert h.grad.tolist() == [1.0, 2.0, 3.0, 4.0]


def test_the_classifier_is_seeded_and_sized_by_the_finest_classes() -> None:
    one = GreedyHashObjective(GreedyHashSettings(), toy_task(seed=3))
    again = GreedyHashObjective(GreedyHashSettings(), toy_task(seed=3))
    other = GreedyHashObjective(GreedyHashSettings(), toy_task(seed=4))
    assert one.weight.shape == (4, 3) and one.weight.requires_grad
    torch.testing.assert_close(one.weight, again.weight)
    assert not torch.equal(one.weight, other.weight)
    assert float(one.weight.abs().max()) <= 0.5  # nn.Linear's range, 1 / sqrt(4 bits)
    assert list(one.state_dict()) == ["weight"]  # the lookup is derived, not state


def test_an_item_labelled_at_an_inner_node_is_a_class_of_its_own() -> None:
    anc = torch.tensor([[0, 1, 3], [0, 2, -1]])  # the second item: coarse class 2 only
    objective = GreedyHashObjective(GreedyHashSettings(), toy_task(anc))
    assert objective.weight.shape == (4, 2)
    assert objective.lookup[2] == 0 and objective.lookup[3] == 1


@pytest.fixture(scope="module")
def toy_fit(tmp_path_factory):
    return fit_toy(GreedyHash, tmp_path_factory.mktemp("greedyhash"))


def test_learns_the_toy_tree(toy_fit) -> None:
    assert_ranks_above_chance(toy_fit, acg_gain=0.8)
    history = toy_fit.hasher.history_
    assert history[-1]["accuracy"] > history[0]["accuracy"]
    assert all(np.isfinite(entry["e1"]) and np.isfinite(entry["e2"]) for entry in history)


def test_the_classifier_trains_and_is_kept_in_the_checkpoint(toy_fit) -> None:
    path = Path(toy_fit.hasher.work_dir) / CHECKPOINT_NAME
    trained = torch.load(path, map_location="cpu", weights_only=False)["objective"]["weight"]
    initial = GreedyHashObjective(GreedyHashSettings(), fit_task(toy_fit)).weight.detach()
    assert trained.shape == initial.shape == (16, 9)  # 16 bits, 9 leaves
    assert not torch.allclose(trained, initial)


def test_resume_continues_the_classifier(toy_fit, tmp_path) -> None:
    """The trained classifier comes back from the checkpoint, not from its seeded start."""
    resumes_to_the_same_codes(GreedyHash, toy_fit, tmp_path)


def test_multi_label_data_is_refused_by_name() -> None:
    _, images, anc = tree_set(seed=1, per_leaf=2)
    sets = np.stack([anc, anc], axis=2)  # (N, K, 2)
    hasher = deep_hasher(GreedyHash, n_bits=8, **TINY_NET)
    with pytest.raises(ValueError, match=r"^greedyhash: needs one label per item.*multi-label"):
        hasher.fit(images, toy_pairs(GreedyHash, sets))
    assert not hasher.is_fitted()


def test_unlabelled_items_are_refused_by_name() -> None:
    _, images, anc = tree_set(seed=1, per_leaf=2)
    anc = anc.copy()
    anc[3] = -1
    with pytest.raises(ValueError, match=r"^greedyhash: ancestors has a row with no node"):
        deep_hasher(GreedyHash, n_bits=8, **TINY_NET).fit(images, toy_pairs(GreedyHash, anc))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"alpha": -0.1}, r"GreedyHashSettings\.alpha must be a number >= 0, got -0\.1"),
        ({"alpha": "1"}, r"GreedyHashSettings\.alpha must be a number >= 0"),
        ({"reduction": "max"}, r"GreedyHashSettings\.reduction must be one of sum, mean"),
        ({"eta": 1.0}, r"settings: unknown settings \['eta'\]"),
    ],
)
def test_bad_settings_are_refused_by_name(settings, message) -> None:
    with pytest.raises(ValueError, match="^greedyhash: " + message):
        GreedyHash(n_bits=8, settings=settings)
    assert GreedyHash(n_bits=8).settings == GreedyHashSettings(alpha=0.1, reduction="mean")
