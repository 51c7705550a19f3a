"""The classifier oracle's own behaviour: codes from the predicted class path, one pattern per node
and level, and single-label data only. The common contract (codes, seeds, segments, save/load,
bad images) is test_hashers_contract.py's."""

from __future__ import annotations

import numpy as np
import pytest

from shdh.core.hierarchy import LabelTree
from shdh.core.level_weights import layer_weights
from shdh.hashers.method_settings import OracleSettings
from shdh.hashers.oracle import Oracle, class_codes, node_pattern
from shdh.hashers.supervision import PairSimilarity
from shdh.training import loop
from tests.unit.toys import TINY_NET, TREE, deep_hasher, tree_set

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_classes_share_the_segments_of_their_shared_ancestors():
    tree = LabelTree.from_nested({"a": {"a1": {}, "a2": {}}, "b": {"b1": {}}})
    leaves = [tree.node_id(n) for n in ("a1", "a2", "b1")]
    paths = tree.ancestors(leaves)  # (3, K=3): root, superclass, class
    codes = class_codes(paths, sizes=[8, 8], levels=[2, 3], seed=3)
    assert codes.shape == (3, 16) and codes.dtype == np.int8
    assert set(np.unique(codes)) <= {-1, 1}
    sup, leaf = codes[:, :8], codes[:, 8:]
    np.testing.assert_array_equal(sup[0], sup[1])  # a1 and a2 share superclass a
    assert not np.array_equal(sup[0], sup[2])  # a and b: two patterns (seeded, they differ)
    assert len({row.tobytes() for row in leaf}) == 3  # one pattern per class
    np.testing.assert_array_equal(class_codes(paths, [8, 8], [2, 3], seed=3), codes)
    np.testing.assert_array_equal(sup[0], node_pattern(3, 2, paths[0, 1], 8))


def _fit(tmp_path, **extra) -> tuple[Oracle, np.ndarray, np.ndarray]:
    _, db_images, db_anc = tree_set(seed=1, per_leaf=40)
    params = {**TINY_NET, "epochs": 3, "lr": 0.05, **extra}
    oracle = deep_hasher(Oracle, n_bits=16, seed=7, work_dir=str(tmp_path / "w"), **params)
    oracle.fit(db_images, PairSimilarity(db_anc, layer_weights(TREE.height), "hierarchical"))
    return oracle, db_images, db_anc


def test_codes_are_the_predicted_class_codes(tmp_path):
    oracle, _, _ = _fit(tmp_path)
    _, q_images, q_anc = tree_set(seed=2, per_leaf=10)
    predicted = oracle.predict_classes(q_images)
    assert (predicted == q_anc[:, -1]).mean() > 0.5  # 9 classes: chance is 0.11
    codes = oracle.encode(q_images)
    index = np.searchsorted(oracle.classes_, predicted)
    np.testing.assert_array_equal(codes, oracle.class_codes_[index])
    assert "accuracy" in oracle.history_[-1]
    # Images of another size are refused by predict_classes as by encode (the contract's).
    other = np.zeros((2, q_images.shape[1] + 2, q_images.shape[2] + 2), np.uint8)
    with pytest.raises(ValueError, match=r"oracle: images have shape .* trained on"):
        oracle.predict_classes(other)


def test_multi_label_data_is_refused_and_leaves_no_state():
    _, images, anc = tree_set(seed=1, per_leaf=4)
    sets = np.stack([anc, anc], axis=2)  # (N, K, 2): ancestor sets of a multi-label item
    oracle = deep_hasher(Oracle, n_bits=16, **TINY_NET)
    with pytest.raises(ValueError, match=r"oracle: needs one class path per item.*multi-label"):
        oracle.fit(images, PairSimilarity(sets, layer_weights(TREE.height), "hierarchical"))
    assert not oracle.is_fitted()


def test_a_failed_fit_leaves_no_state(monkeypatch):
    """Training fails after the class table is made: none of it stays behind."""

    def training_fails(*args, **kwargs):
        raise RuntimeError("the training loop failed")

    monkeypatch.setattr(loop, "train", training_fails)
    _, images, anc = tree_set(seed=1, per_leaf=4)
    oracle = deep_hasher(Oracle, n_bits=16, **TINY_NET)
    with pytest.raises(RuntimeError, match="the training loop failed"):
        oracle.fit(images, PairSimilarity(anc, layer_weights(TREE.height), "hierarchical"))
    assert not oracle.is_fitted() and not hasattr(oracle, "classes_")


def test_bad_loop_settings_are_refused_when_made():
    with pytest.raises(ValueError, match=r"oracle: LoopSettings\.lr is out of range"):
        Oracle(n_bits=16, loop={**TINY_NET, "lr": -1.0})  # a saved params.json's form


def test_its_settings_are_checked_when_made():
    """The oracle's own settings are one object too (its reduction), as SHDH's and DPSH's."""
    assert Oracle(n_bits=16).settings == OracleSettings(reduction="mean")
    assert Oracle(n_bits=16, settings={"reduction": "sum"}).settings.reduction == "sum"
    with pytest.raises(ValueError, match=r"oracle: OracleSettings\.reduction must be one of"):
        Oracle(n_bits=16, settings={"reduction": "median"})
    with pytest.raises(ValueError, match=r"oracle: settings: unknown settings \['eta'\]"):
        Oracle(n_bits=16, settings={"eta": 1.0})
