"""OrthoHash's own behaviour: its loss on the brief's toy batch (single- and multi-label), the
seeded Bernoulli codebook kept in the checkpoint, the batch-normed hashing head whose eval-mode
sign is the code, learning the toy tree, and the settings it refuses. The common contract is
test_hashers_contract.py's."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from shdh.hashers.method_settings import OrthoHashSettings
from shdh.hashers.orthohash import OrthoHash, OrthoHashObjective
from shdh.training import inference
from shdh.training.checkpoint import CHECKPOINT_NAME
from tests.unit.centre_toys import (
    TOY_ANC,
    TOY_CODES,
    TOY_U,
    assert_ranks_above_chance,
    fit_task,
    fit_toy,
    toy_sets,
    toy_task,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _objective(anc: torch.Tensor = TOY_ANC, **settings) -> OrthoHashObjective:
    """The brief's example bypasses the batch norm (v = u) and takes H_4's rows as codebook."""
    objective = OrthoHashObjective(OrthoHashSettings(**settings), toy_task(anc))
    objective.codebook.copy_(TOY_CODES)
    return objective


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({}, 5.930776),  # s = 8, m = 0.2
        ({"margin": 0.0}, 4.405046),
        ({"reduction": "sum"}, 4 * 5.930776),
    ],
)
def test_loss_on_the_toy_batch(settings, expected) -> None:
    loss, parts = _objective(**settings)(TOY_U, TOY_ANC)
    assert loss.item() == pytest.approx(expected, abs=1e-5)
    assert float(parts["e1"]) == pytest.approx(expected, abs=1e-5)
    # The toy outputs lie nearest the wrong codes (the brief's note): no item nearest its own.
    assert float(parts["accuracy"]) == 0.0


def test_multi_label_loss_is_the_label_smoothing_cross_entropy() -> None:
    """Item 1 with classes {0, 2}: target (1/2, 0, 1/2), the margin on both positives."""
    sets = toy_sets()
    loss, parts = _objective(sets)(TOY_U[:1], sets[:1])
    assert loss.item() == pytest.approx(7.951207, abs=1e-5)
    assert "accuracy" not in parts  # no single class to be right about
    single, _ = _objective(sets)(TOY_U[1:], sets[1:])  # one label each: the plain CE
    plain, _ = _objective()(TOY_U[1:], TOY_ANC[1:])
    assert float(single) == pytest.approx(float(plain), abs=1e-6)


def test_the_codebook_is_a_seeded_bernoulli_draw() -> None:
    one = OrthoHashObjective(OrthoHashSettings(), toy_task(seed=1)).codebook
    again = OrthoHashObjective(OrthoHashSettings(), toy_task(seed=1)).codebook
    other = OrthoHashObjective(OrthoHashSettings(), toy_task(seed=2)).codebook
    assert one.shape == (3, 4) and set(one.unique().tolist()) <= {-1.0, 1.0}
    torch.testing.assert_close(one, again)
    assert not torch.equal(one, other)
    assert OrthoHashObjective.head_norm


@pytest.fixture(scope="module")
def toy_fit(tmp_path_factory):
    return fit_toy(OrthoHash, tmp_path_factory.mktemp("orthohash"))


def test_learns_the_toy_tree(toy_fit) -> None:
    assert_ranks_above_chance(toy_fit, acg_gain=0.8)


def test_codes_are_the_sign_of_the_batch_normed_head(toy_fit) -> None:
    """v = BN(W x) with no bias in W, in the saved network; codes sgn(v) with the running
    statistics (eval mode), before any codebook."""
    model = toy_fit.hasher.model_
    assert model.head.bias is None and isinstance(model.head_norm, torch.nn.BatchNorm1d)
    assert "net.head_norm.running_mean" in toy_fit.hasher.state()
    v = inference.outputs(model, toy_fit.queries, device="cpu")
    codes = toy_fit.hasher.encode(toy_fit.queries)
    torch.testing.assert_close(torch.as_tensor(codes), torch.where(v > 0, 1, -1).to(torch.int8))


def test_the_codebook_is_kept_in_the_checkpoint(toy_fit) -> None:
    path = Path(toy_fit.hasher.work_dir) / CHECKPOINT_NAME
    state = torch.load(path, map_location="cpu", weights_only=False)["objective"]
    assert list(state) == ["codebook"]
    made = OrthoHashObjective(OrthoHashSettings(), fit_task(toy_fit)).codebook
    torch.testing.assert_close(state["codebook"], made)
    assert state["codebook"].shape == (9, 16)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"scale": 0.0}, r"OrthoHashSettings\.scale must be a number > 0, got 0\.0"),
        ({"margin": -0.2}, r"OrthoHashSettings\.margin must be a number >= 0"),
        ({"reduction": "none"}, r"OrthoHashSettings\.reduction must be one of sum, mean"),
        ({"s": 8.0}, r"settings: unknown settings \['s'\]"),
    ],
)
def test_bad_settings_are_refused_by_name(settings, message) -> None:
    with pytest.raises(ValueError, match="^orthohash: " + message):
        OrthoHash(n_bits=8, settings=settings)
    assert OrthoHash(n_bits=8).settings == OrthoHashSettings(scale=8.0, margin=0.2)
