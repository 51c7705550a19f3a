"""The fit runner (shdh.steps.fit.run_fit): a planned fit trained alike for every front door.
Tracked, it is kept as the pipeline keeps it (the model folder, fit.json, an MLflow run named as
the fit and tagged with its seed); untracked, as the bundle runs it, it writes nothing of that."""

from __future__ import annotations

import json

import mlflow
import numpy as np

from shdh.hashers.itq import ITQ
from shdh.hashers.supervision import PairSimilarity
from shdh.plan.fits import make_fit
from shdh.steps.fit import Tracked, run_fit


def _inputs() -> tuple[np.ndarray, PairSimilarity]:
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 12)).astype(np.float32)
    leaf = rng.integers(0, 4, 60)
    ancestors = np.stack([np.zeros(60, int), 1 + leaf // 2, 3 + leaf], axis=1)
    return X, PairSimilarity(ancestors, np.array([0.0, 2 / 3, 1 / 3]), "label")


def test_an_untracked_fit_is_the_hasher_made_by_hand_and_writes_nothing(tmp_path):
    X, pairs = _inputs()
    fit = make_fit("itq", 8, None, seed=4, models_root=tmp_path, params={"n_iter": 5})
    fitted = run_fit(fit, ITQ, X, pairs)
    by_hand = ITQ(n_bits=8, seed=4, n_iter=5)
    by_hand.fit(X, pairs)
    assert np.array_equal(fitted.hasher.encode(X), by_hand.encode(X))
    assert (fitted.n_train, fitted.checkpoint_from) == (60, None) and fitted.seconds >= 0
    assert not fit.out_dir.exists()


def test_a_tracked_fit_keeps_its_folder_its_record_and_a_run_named_as_the_fit(tmp_path):
    X, pairs = _inputs()
    fit = make_fit("itq", 8, 3, seed=4, models_root=tmp_path, params={"n_iter": 5})
    run_fit(fit, ITQ, X, pairs, tracked=Tracked({"n_iter": 5}, tags={"profile": "unit"}))
    assert fit.out_dir == tmp_path / "itq" / "itq-8-seed3"
    record = json.loads(fit.record.read_text())
    assert {k: record[k] for k in ("method", "bits", "own_seed", "seed", "n_train_items")} == {
        "method": "itq",
        "bits": 8,
        "own_seed": 3,
        "seed": 3,
        "n_train_items": 60,
    }
    assert (fit.hasher_dir / "params.json").is_file()
    run = mlflow.MlflowClient().get_run(json.loads(fit.run_ref.read_text())["run_id"])
    assert run.info.run_name == fit.name == "itq-8-seed3"
    assert (run.data.tags["seed"], run.data.tags["profile"]) == ("3", "unit")
    assert (run.data.params["n_iter"], run.data.params["n_train_items"]) == ("5", "60")
    assert "fit_seconds" in run.data.metrics
