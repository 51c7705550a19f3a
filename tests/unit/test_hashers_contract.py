"""One contract test run over every method in shdh.hashers.REGISTRY (scikit-learn style).

Each method, on a toy hierarchical set (3 superclasses x 3 classes, K = 3), must: refuse to
encode or save before fit; give (N, n_bits) int8 codes in {-1, +1}; give the same codes when
fitted twice with the same seed; survive a save/load round trip bit for bit, through
Hasher.load and its own class; refuse a saved model loaded as another method or with another
bit length; and retrieve better than seeded random codes (NDCG@50 from shdh.metrics.evaluate).

A method whose module is missing or broken fails here loudly: it is never skipped.
"""

from __future__ import annotations

import inspect
import json
from typing import Any, ClassVar

import numpy as np
import pytest

from shdh.hashers import REGISTRY, get_hasher_class
from shdh.hashers.base import Hasher, NotFittedError
from shdh.hashers.supervision import PairSimilarity
from shdh.hierarchy import LabelTree, layer_weights
from shdh.metrics import evaluate
from shdh.retrieval import pack_codes

N_BITS = 16
N_SUPER, N_CLASS = 3, 3
PER_LEAF_DB, PER_LEAF_QUERY = 40, 10
TOP_N = 50
TREE = LabelTree.from_nested(
    {f"g{a}": {f"g{a}c{b}": {} for b in range(N_CLASS)} for a in range(N_SUPER)}
)

# Small budgets so that each method's case takes seconds; names a constructor lacks are
# dropped (a renamed budget knob only costs time, it cannot hide a contract failure).
# Deep methods: a 1/16-width CNN-F, one epoch, one CPU thread.
DEEP = {"width": 0.0625, "epochs": 1, "batch_size": 64, "device": "cpu", "num_threads": 1}
BUDGET: dict[str, dict[str, Any]] = {
    "itq": {"n_iter": 20},
    "kmh": {"n_iter": 10},
    "ksh": {"n_anchors": 60, "n_labelled": 300, "n_iter": 100},
    "ksh+h": {"n_anchors": 60, "n_labelled": 300, "n_iter": 100},
    "lfh": {"n_iter": 10, "n_sampled": 64},
    "cosdish": {"n_outer": 3, "n_alternations": 2},
    "cosdish+h": {"n_outer": 3, "n_alternations": 2},
    "dpsh": DEEP,
    "shdh": DEEP,
    "oracle": {**DEEP, "epochs": 3, "lr": 0.05},
}


class _OtherMethod(Hasher):
    """Stands for "some other method" when loading a saved model as the wrong one."""

    name: ClassVar[str] = "other-method"


def _toy_set(seed: int, per_leaf: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features (N, 32) float32, images (N, 32, 32) uint8, ancestors (N, 3)), shuffled.

    Features: Gaussian clusters per leaf around a per-superclass centre, so sibling leaves are
    closer than cousins. Images: the superclass lights a horizontal band, the class a brighter
    block inside it, so siblings share the band. Centres come from a fixed seed; `seed` draws
    the items, so training and query sets share classes but not items.
    """
    centres = np.random.default_rng(1234)
    super_c = 6.0 * centres.standard_normal((N_SUPER, 32))
    leaf_c = super_c.repeat(N_CLASS, axis=0) + 2.5 * centres.standard_normal(
        (N_SUPER * N_CLASS, 32)
    )
    rng = np.random.default_rng(seed)
    leaf = rng.permutation(np.repeat(np.arange(N_SUPER * N_CLASS), per_leaf))
    feats = (leaf_c[leaf] + rng.standard_normal((len(leaf), 32))).astype(np.float32)
    images = 40 + rng.normal(0, 12, (len(leaf), 32, 32))
    for i, k in enumerate(leaf):
        a, b = divmod(int(k), N_CLASS)
        images[i, 10 * a + 1 : 10 * a + 11] += 100
        images[i, 10 * a + 1 : 10 * a + 11, 10 * b + 1 : 10 * b + 11] += 100
    node = [TREE.node_id(f"g{k // N_CLASS}c{k % N_CLASS}") for k in leaf]
    return feats, np.clip(images, 0, 255).astype(np.uint8), TREE.ancestors(node)


def _make(name: str, tmp_path, tag: str) -> Hasher:
    cls = get_hasher_class(name)  # a missing module fails here
    accepted = inspect.signature(cls.__init__).parameters
    params = {k: v for k, v in BUDGET.get(name, {}).items() if k in accepted}
    if "work_dir" in accepted:
        params["work_dir"] = str(tmp_path / f"work-{tag}")
    return cls(n_bits=N_BITS, seed=7, **params)


def _ndcg(q_codes, db_codes, q_anc, db_anc, sizes, weights) -> float:
    metrics, _ = evaluate(
        pack_codes(q_codes),
        pack_codes(db_codes),
        q_anc,
        db_anc,
        sizes,
        weights,
        n=TOP_N,
        wr_ns=(TOP_N,),
        curve_max=TOP_N,
    )
    return metrics[f"ndcg@{TOP_N}"]


@pytest.mark.parametrize("name", list(REGISTRY))
def test_hasher_contract(name: str, tmp_path) -> None:
    db_feats, db_images, db_anc = _toy_set(seed=1, per_leaf=PER_LEAF_DB)
    q_feats, q_images, q_anc = _toy_set(seed=2, per_leaf=PER_LEAF_QUERY)
    hasher = _make(name, tmp_path, "a")
    images = hasher.input_kind == "images"
    X, Q = (db_images, q_images) if images else (db_feats, q_feats)
    pairs = None
    if hasher.supervision is not None:
        pairs = PairSimilarity(db_anc, layer_weights(TREE.height), hasher.supervision)

    # Refuses to work before fit.
    with pytest.raises(NotFittedError):
        hasher.encode(Q)
    with pytest.raises(NotFittedError):
        hasher.save(tmp_path / "unfitted")

    # Shapes and values.
    assert hasher.fit(X, pairs) is hasher
    codes = hasher.encode(Q)
    assert codes.shape == (len(Q), N_BITS) and codes.dtype == np.int8
    assert set(np.unique(codes)) <= {-1, 1}
    db_codes = hasher.encode(X)
    assert db_codes.shape == (len(X), N_BITS)
    sizes, weights = hasher.segment_sizes(), hasher.segment_weights()
    assert sum(sizes) == N_BITS and len(weights) == len(sizes)

    # Deterministic under a seed.
    again = _make(name, tmp_path, "b").fit(X, pairs)
    np.testing.assert_array_equal(again.encode(Q), codes, err_msg=f"{name}: not deterministic")

    # Save / load round trip, through the base class and through the method's own class.
    saved = hasher.save(tmp_path / "model")
    for loader in (Hasher, type(hasher)):
        loaded = loader.load(saved)
        assert type(loaded) is type(hasher)
        assert loaded.get_params() == hasher.get_params()
        np.testing.assert_array_equal(
            loaded.encode(Q), codes, err_msg=f"{name}: load changed codes"
        )

    # A saved model refuses to load as another method, or with another bit length.
    with pytest.raises(ValueError, match="holds method"):
        _OtherMethod.load(saved)
    meta_path = saved / "params.json"
    meta = json.loads(meta_path.read_text())
    meta["params"]["n_bits"] = 2 * N_BITS
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(ValueError):
        Hasher.load(saved)

    # Retrieves better than random codes on the toy hierarchy.
    ndcg = _ndcg(codes, db_codes, q_anc, db_anc, sizes, weights)
    rng = np.random.default_rng(0)
    random_db = np.where(rng.random((len(X), N_BITS)) < 0.5, 1, -1).astype(np.int8)
    random_q = np.where(rng.random((len(Q), N_BITS)) < 0.5, 1, -1).astype(np.int8)
    chance = _ndcg(random_q, random_db, q_anc, db_anc, [N_BITS], [1.0])
    assert ndcg > chance + 0.1, f"{name}: NDCG@{TOP_N} {ndcg:.3f} vs random codes {chance:.3f}"
