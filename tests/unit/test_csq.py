"""CSQ's own behaviour: its loss on the brief's toy batch, the hash centres for every code length
(Hadamard rows, [H; -H], balanced random ones that never fail, e.g. at 48 bits), the multi-label
centre, the centres kept in the checkpoint, learning the toy tree, and the settings it refuses.
The common contract is test_hashers_contract.py's."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from shdh.hashers.csq import (
    CSQ,
    MIN_DISTANCE,
    CSQObjective,
    hash_centres,
    min_distance,
    sylvester_hadamard,
)
from shdh.hashers.method_settings import CSQSettings
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


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"lambda_q": 1e-4}, 0.765379),
        ({"lambda_q": 1e-3}, 0.765730),
        ({"lambda_q": 0.05}, 0.784838),
        ({"lambda_q": 0.05, "reduction": "sum"}, 4 * 0.784838),
    ],
)
def test_loss_on_the_toy_batch(settings, expected) -> None:
    """4 bits and 3 classes: the centres are the first rows of H_4, the brief's."""
    objective = CSQObjective(CSQSettings(**settings), toy_task())
    torch.testing.assert_close(objective.centres, TOY_CODES)
    loss, parts = objective(TOY_U, TOY_ANC)
    assert loss.item() == pytest.approx(expected, abs=1e-5)
    scale = 4 if settings.get("reduction") == "sum" else 1
    assert float(parts["e1"]) == pytest.approx(scale * 0.765340, abs=1e-5)
    assert float(parts["e2"]) == pytest.approx(scale * settings["lambda_q"] * 0.389946, abs=1e-5)


def test_the_multi_label_centre_is_the_sign_of_the_sum_with_ties_from_one_vector() -> None:
    """Item 1 with classes {0, 2}: c_0 + c_2 = (2, 2, 0, 0), so (1, 1, r_3, r_4)."""
    sets = toy_sets()
    objective = CSQObjective(CSQSettings(), toy_task(sets))
    torch.testing.assert_close(objective.centres, TOY_CODES)
    centres = objective.item_centres(sets)
    tie = objective.tie
    assert set(tie.tolist()) <= {-1.0, 1.0} and tie.shape == (4,)
    torch.testing.assert_close(centres[0], torch.tensor([1.0, 1.0, tie[2], tie[3]]))
    torch.testing.assert_close(centres[1:], TOY_CODES[torch.tensor([0, 1, 2])])
    loss, _ = objective(TOY_U, sets)
    assert torch.isfinite(loss)


def test_hadamard_centres() -> None:
    h = sylvester_hadamard(4)
    assert h.tolist() == [[1, 1, 1, 1], [1, -1, 1, -1], [1, 1, -1, -1], [1, -1, -1, 1]]
    torch.testing.assert_close(h @ h.T, 4 * torch.eye(4))
    rows = hash_centres(10, 16, torch.Generator().manual_seed(0))
    torch.testing.assert_close(rows, sylvester_hadamard(16)[:10])
    assert min_distance(rows) == 8  # exactly L/2
    both = hash_centres(20, 16, torch.Generator().manual_seed(0))  # 16 < C <= 32: [H; -H]
    torch.testing.assert_close(both[16:], -sylvester_hadamard(16)[:4])
    assert min_distance(both) == 8
    with pytest.raises(ValueError, match="power of 2, got 12"):
        sylvester_hadamard(12)


@pytest.mark.parametrize(
    ("n_classes", "n_bits"), [(10, 48), (100, 48), (33, 16), (600, 12), (3, 1)]
)
def test_random_centres_never_fail(n_classes: int, n_bits: int) -> None:
    """A code length that is no power of 2 (DeepHash-pytorch's scipy call fails at 48), or more
    classes than [H; -H] has rows: balanced random rows, seeded, as far apart as found."""
    centres = hash_centres(n_classes, n_bits, torch.Generator().manual_seed(5))
    again = hash_centres(n_classes, n_bits, torch.Generator().manual_seed(5))
    assert centres.shape == (n_classes, n_bits)
    torch.testing.assert_close(centres, again)
    assert set(centres.unique().tolist()) <= {-1.0, 1.0}
    assert ((centres < 0).sum(dim=1) == n_bits // 2).all()  # floor(L/2) bits at -1 each
    if n_classes <= 100 and n_bits >= 16:
        assert min_distance(centres) >= MIN_DISTANCE * n_bits


@pytest.fixture(scope="module")
def toy_fit(tmp_path_factory):
    return fit_toy(CSQ, tmp_path_factory.mktemp("csq"))


def test_learns_the_toy_tree(toy_fit) -> None:
    assert_ranks_above_chance(toy_fit, acg_gain=0.8)


def test_the_centres_are_kept_in_the_checkpoint(toy_fit) -> None:
    path = Path(toy_fit.hasher.work_dir) / CHECKPOINT_NAME
    state = torch.load(path, map_location="cpu", weights_only=False)["objective"]
    made = CSQObjective(CSQSettings(), fit_task(toy_fit))
    assert sorted(state) == ["centres", "tie"]
    torch.testing.assert_close(state["centres"], sylvester_hadamard(16)[:9])
    torch.testing.assert_close(state["centres"], made.centres)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"lambda_q": -1.0}, r"CSQSettings\.lambda_q must be a number >= 0, got -1\.0"),
        ({"lambda_q": float("nan")}, r"CSQSettings\.lambda_q must be a number >= 0"),
        ({"reduction": "median"}, r"CSQSettings\.reduction must be one of sum, mean"),
        ({"lambda": 1.0}, r"settings: unknown settings \['lambda'\]"),
    ],
)
def test_bad_settings_are_refused_by_name(settings, message) -> None:
    with pytest.raises(ValueError, match="^csq: " + message):
        CSQ(n_bits=8, settings=settings)
    assert CSQ(n_bits=8).settings == CSQSettings(lambda_q=1e-3, reduction="mean")


def test_centres_follow_the_items_finest_labels() -> None:
    """A class per finest label present, inner-node labels included, in node-id order."""
    anc = torch.tensor([[0, 2, 5], [0, 1, -1], [0, 1, 3]])
    objective = CSQObjective(CSQSettings(), toy_task(anc))
    assert objective.centres.shape == (3, 4)
    rows = [int(objective.lookup[node]) for node in (1, 3, 5)]
    assert rows == [0, 1, 2]
    np.testing.assert_array_equal(objective.item_centres(anc), objective.centres[[2, 0, 1]])
