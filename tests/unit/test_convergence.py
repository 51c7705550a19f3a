"""The convergence rule (shdh.training.convergence): held-out validation items, the plateau schedule
and its stop, for every deep method, resumed exactly; and the checkpoint writer it relies on."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from shdh.hashers import hasher_class
from shdh.hashers.shdh import shdh_objective
from shdh.hashers.supervision import PairSimilarity
from shdh.training import convergence, loop
from shdh.training.checkpoint import CHECKPOINT_NAME
from shdh.training.checkpoint_writer import CheckpointWriter, host_copy
from shdh.training.loop_settings import LoopSettings, TrainConfig
from tests.unit.test_deep_hashers import TRAIN, U
from tests.unit.toys import deep_hasher

pytestmark = pytest.mark.usefixtures("one_torch_thread")

PLATEAU = {
    "n_bits": 16,
    "width": 1 / 16,
    "image_size": 8,
    "batch_size": 16,
    "device": "cpu",
    "val_size": 20,
    "schedule": "plateau",
    "patience": 0,
    "min_delta": 0.5,  # no epoch gains this much: the lr decays every epoch
    "max_decays": 1,
    "lr_decay": 0.5,
    "epochs": 10,
}
MODES = {"shdh": "hierarchical", "dpsh": "label", "oracle": "hierarchical"}


def _fit(method: str, **params):
    hasher = deep_hasher(hasher_class(method), **(PLATEAU | params))
    return hasher.fit(TRAIN[0], PairSimilarity(TRAIN[1], U, MODES[method]))


def _train_8_bits(tmp_path: Path, on_epoch=None, **config) -> loop.TrainResult:
    """The training loop itself (no hasher around it) on the toy images, an 8-bit SHDH code."""
    return loop.train(
        TrainConfig(n_bits=8, width=1 / 16, image_size=8, batch_size=16, device="cpu", **config),
        TRAIN[0],
        TRAIN[1],
        np.arange(len(TRAIN[0])),
        tmp_path,
        segment_sizes=[4, 4],
        segment_levels=[2, 3],
        layer_weights=list(U),
        objective=shdh_objective([4, 4], [2, 3], list(U)),
        on_epoch=on_epoch,
    )


def test_the_split_holds_out_seeded_items_and_samples_the_database() -> None:
    split = convergence.validation_split(100, 10, seed=3)
    assert len(split.queries) == 10 and len(split.train) == 90
    assert not set(split.queries) & set(split.train)
    assert set(split.database) <= set(split.train)
    again = convergence.validation_split(100, 10, seed=3)
    assert np.array_equal(again.queries, split.queries)
    other = convergence.validation_split(100, 10, seed=4)
    assert not np.array_equal(other.queries, split.queries)
    none = convergence.validation_split(100, 0, seed=3)
    assert np.array_equal(none.train, np.arange(100)) and len(none.queries) == 0
    with pytest.raises(ValueError, match="val_size=99 leaves fewer than 2 of the 100"):
        convergence.validation_split(100, 99, seed=0)


def test_plateau_needs_validation_items_and_known_schedules() -> None:
    with pytest.raises(ValueError, match="'plateau' follows the validation score"):
        LoopSettings(schedule="plateau")
    with pytest.raises(ValueError, match="schedule must be one of"):
        LoopSettings(schedule="cosine")
    with pytest.raises(ValueError, match="patience is out of range"):
        LoopSettings(val_size=5, schedule="plateau", patience=-1)


def test_plateau_decays_then_stops() -> None:
    config = TrainConfig(lr=0.1, lr_decay=0.5, val_size=5, schedule="plateau", patience=1)
    model = torch.nn.Linear(2, 2)
    optimizer = torch.optim.SGD(model.parameters(), lr=config.lr)
    scheduler = convergence.make_scheduler(config, optimizer)
    stops = [convergence.step_schedule(config, scheduler, s) for s in [0.5, 0.6, 0.6, 0.6]]
    assert stops == [False, False, False, False]
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.05)  # one decay after 2 flat
    stops = [convergence.step_schedule(config, scheduler, 0.6) for _ in range(4)]
    # two more flat epochs decay it again (2 decays), the next plateau after them ends the fit
    assert stops == [False, False, False, True]
    assert convergence.decays(config, 0.1 * 0.5**3) == 3


def test_a_step_schedule_ignores_the_score_and_a_plateau_needs_one() -> None:
    config = TrainConfig(lr=0.1, lr_decay=0.5, lr_decay_every=1)
    optimizer = torch.optim.SGD(torch.nn.Linear(2, 2).parameters(), lr=config.lr)
    optimizer.step()  # as the loop does before its schedule steps
    assert not convergence.step_schedule(
        config, convergence.make_scheduler(config, optimizer), None
    )
    assert optimizer.param_groups[0]["lr"] == pytest.approx(0.05)
    plateau = TrainConfig(val_size=5, schedule="plateau")
    scheduler = convergence.make_scheduler(plateau, optimizer)
    with pytest.raises(ValueError, match="needs a validation score"):
        convergence.step_schedule(plateau, scheduler, None)


@pytest.mark.parametrize("method", ["shdh", "dpsh", "oracle"])
def test_every_deep_method_validates_each_epoch_and_stops_at_the_plateau(method: str) -> None:
    history = _fit(method).history_
    # the first epoch sets the best score; no later one gains min_delta = 0.5, so the lr decays
    # after the second (patience 0) and the third's plateau, after max_decays = 1, ends the fit
    assert len(history) == 3
    assert [e["lr"] for e in history] == pytest.approx([0.01, 0.01, 0.005])
    assert [e[convergence.STOP_KEY] for e in history] == [False, False, True]
    for entry in history:
        assert 0 < entry[convergence.VAL_METRIC] <= 1
        assert entry["val_seconds"] > 0


def test_still_improving_reads_the_last_patience_plus_one_epochs() -> None:
    def history(*scores: float) -> list[dict]:
        return [{convergence.VAL_METRIC: s} for s in scores]

    def gaining(*scores: float) -> bool:
        return convergence.still_improving(history(*scores), patience=1, min_delta=0.01)

    assert gaining(0.5, 0.6, 0.6, 0.62)  # +0.02 within the last 2 epochs
    assert not gaining(0.5, 0.6, 0.605, 0.6)  # +0.005 only
    assert not gaining(0.5, 0.7, 0.6, 0.65)  # below the earlier best
    assert gaining(0.5, 0.6)  # nothing earlier to stall on
    assert not convergence.still_improving([{"loss": 1.0}], 1, 0.01)  # no validation score


def test_ended_by_tells_the_rule_from_the_cap_and_ignores_other_schedules() -> None:
    def ended(stopped: bool, *scores: float) -> str | None:
        entries = [{convergence.VAL_METRIC: s, convergence.STOP_KEY: False} for s in scores]
        entries[-1][convergence.STOP_KEY] = stopped
        return convergence.ended_by(entries, patience=1, min_delta=0.01)

    assert ended(True, 0.5, 0.6, 0.6) == convergence.BY_THE_RULE
    assert ended(False, 0.5, 0.6, 0.6, 0.62) == convergence.AT_THE_CAP_GAINING
    assert ended(False, 0.5, 0.6, 0.6, 0.6) == convergence.AT_THE_CAP_STALLED
    assert convergence.ended_by([{"loss": 1.0}], 1, 0.01) is None  # a step-schedule fit
    assert convergence.ended_by([], 1, 0.01) is None


def test_a_fit_the_cap_ends_while_still_gaining_warns_and_one_the_rule_ends_does_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with caplog.at_level("WARNING", logger="shdh.training.loop"):
        _fit("shdh")  # ended by the rule at epoch 3 of 10
    assert "has not converged" not in caplog.text
    with caplog.at_level("WARNING", logger="shdh.training.loop"):
        history = _fit("shdh", epochs=2, patience=5, min_delta=0.0).history_
    assert len(history) == 2 and not history[-1][convergence.STOP_KEY]
    assert "ended at the epoch cap (train.epochs = 2)" in caplog.text
    assert "has not converged by the rule" in caplog.text


def test_validation_matches_the_evaluation_of_the_held_out_items(tmp_path: Path) -> None:
    """The score is the tables' NDCG@100 of the held-out items against the database sample."""
    from shdh.core.metrics import evaluate
    from shdh.ranking.exact import pack_codes

    hasher = _fit("shdh", max_decays=0, work_dir=str(tmp_path))
    split = convergence.validation_split(len(TRAIN[0]), PLATEAU["val_size"], seed=0)
    q, db = hasher.encode(TRAIN[0][split.queries]), hasher.encode(TRAIN[0][split.database])
    scores, _ = evaluate(
        pack_codes(q),
        pack_codes(db),
        TRAIN[1][split.queries],
        TRAIN[1][split.database],
        hasher.segment_sizes(),
        hasher.segment_weights(),
        n=100,
        wr_ns=(100,),
        curve_max=100,
    )
    assert hasher.history_[-1][convergence.VAL_METRIC] == pytest.approx(scores["ndcg@100"])


def test_a_stopped_fit_resumes_as_stopped_and_an_interrupted_one_exactly(tmp_path: Path) -> None:
    whole = _fit("shdh", min_delta=0.0, patience=1, max_decays=1, epochs=4)
    cut = _fit("shdh", min_delta=0.0, patience=1, max_decays=1, epochs=2, work_dir=str(tmp_path))
    resumed = deep_hasher(
        hasher_class("shdh"),
        **(PLATEAU | {"min_delta": 0.0, "patience": 1, "max_decays": 1, "epochs": 4}),
        work_dir=str(tmp_path),
    )
    resumed.fit(TRAIN[0], PairSimilarity(TRAIN[1], U, "hierarchical"), resume="always")
    assert len(cut.history_) == 2
    assert [e["loss"] for e in resumed.history_] == [e["loss"] for e in whole.history_]
    assert [e[convergence.VAL_METRIC] for e in resumed.history_] == [
        e[convergence.VAL_METRIC] for e in whole.history_
    ]
    for a, b in zip(resumed.model_.parameters(), whole.model_.parameters(), strict=True):
        assert torch.equal(a, b)


def test_the_loop_needs_a_validate_function_for_held_out_items(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="val_size > 0 needs a validate function"):
        _train_8_bits(tmp_path, val_size=4)


def test_the_background_writer_saves_the_snapshot_not_later_updates(tmp_path: Path) -> None:
    weights = torch.arange(6, dtype=torch.float32)
    writer = CheckpointWriter(tmp_path / "c.pt", background=True)
    writer.write({"model": {"w": weights}, "history": [{"loss": 1.0}], "epoch": 1})
    weights.add_(100)  # the next epoch changes the live tensor while the file is written
    writer.wait()
    saved = torch.load(tmp_path / "c.pt", weights_only=True)
    assert torch.equal(saved["model"]["w"], torch.arange(6, dtype=torch.float32))
    assert saved["epoch"] == 1 and saved["history"] == [{"loss": 1.0}]


def test_a_failed_background_write_is_raised_with_the_path(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("not a folder")
    target = tmp_path / "a-file" / "c.pt"
    writer = CheckpointWriter(target, background=True)
    writer.write({"w": torch.zeros(2)})
    with pytest.raises(RuntimeError, match=r"a-file/c.pt: writing failed"):
        writer.wait()
    writer.wait()  # the error is raised once


def test_host_copy_keeps_the_structure_and_owns_its_storage() -> None:
    live = {"a": [torch.ones(2), (torch.zeros(1), 3)], "lr": 0.5}
    copy = host_copy(live)
    live["a"][0].add_(1)
    assert torch.equal(copy["a"][0], torch.ones(2)) and copy["a"][1][1] == 3
    assert isinstance(copy["a"][1], tuple) and copy["lr"] == 0.5
    assert not math.isnan(copy["lr"])


def test_checkpoints_follow_the_interval_and_the_last_epoch_always_gets_one(
    tmp_path: Path,
) -> None:
    """checkpoint_seconds spaces the checkpoints out; the final epoch is written whatever the
    interval, so a finished fit can always be resumed (or extended)."""
    seen = []

    def on_epoch(entry: dict) -> None:
        path = tmp_path / CHECKPOINT_NAME
        saved = torch.load(path, weights_only=True)["epoch"] if path.exists() else None
        seen.append((entry["epoch"], saved))

    _train_8_bits(tmp_path, epochs=3, checkpoint_seconds=3600, on_epoch=on_epoch)
    assert seen == [(1, None), (2, None), (3, 3)]
