"""One contract, run over every method of the catalogue (scikit-learn style).

Every method, on a toy hierarchical set (3 superclasses x 3 classes, K = 3), must:
- be registered under its own name, with its supervision and input kind;
- take keyword-only hyper-parameters that get_params() returns and that rebuild it, and do no
  work in the constructor;
- refuse to encode or save before fit, and give (N, n_bits) int8 codes with both signs after;
- rank with plain Hamming distance (one segment of weight 1), or, for the hierarchical codes,
  with one segment per tree level below the root, weighted by u_k;
- give bit-identical state and codes when fitted twice with a seed, and other codes with another
  seed (unless it has no random step);
- survive a save/load round trip bit for bit, through shdh.hashers.load_hasher and its own class,
  and refuse a saved model loaded as another method, with another bit length, or with an array
  missing;
- retrieve better than seeded random codes (ACG and NDCG at 50, from shdh.core.metrics.evaluate);
- refuse bad input by name: non-finite, malformed or wrongly sized features or images, missing
  or wrong pair labels, and n_bits below 1, leaving an unfitted hasher unfitted.

What only one method does is tested in that method's own file. A method whose module is missing
or broken fails here loudly: it is never skipped.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
import re
from dataclasses import dataclass, field
from typing import Any, ClassVar

import numpy as np
import pytest

from shdh.core.level_weights import layer_weights
from shdh.core.metrics import evaluate
from shdh.hashers import hasher_class, load_hasher
from shdh.hashers.base import FORMAT, Hasher, NotFittedError
from shdh.hashers.method_catalogue import METHODS as DECLARED
from shdh.hashers.supervision import PairSimilarity
from shdh.ranking.exact import pack_codes
from tests.unit.toys import TINY_NET, TREE, deep_hasher, model_params, tree_set

N_BITS = 16
TOP_N = 50
U = layer_weights(TREE.height)  # (0, 2/3, 1/3)


@dataclass(frozen=True)
class Spec:
    """What the contract expects of one method, and a budget small enough for a unit test."""

    supervision: str | None
    inputs: str = "features"  # or "images"
    level_segments: bool = False  # one segment per tree level instead of plain Hamming
    seeded: bool = True  # False: no random step, so the seed changes nothing
    budget: dict[str, Any] = field(default_factory=dict)
    # How far its ACG@50 must land above random codes' (about 0.44; at most 2). The shallow
    # methods reach 1.6-1.8 here; a tiny net trained one epoch 1.5; the oracle's classifier
    # (a reference row, three epochs from scratch) about 1.2.
    acg_gain: float = 1.0


DECLARED_BY_NAME = {m.name: m for m in DECLARED}  # every declared method, in the catalogue order
KSH_BUDGET = {"n_anchors": 60, "n_labelled": 300, "n_iter": 100}
COSDISH_BUDGET = {"n_outer": 3, "n_alternations": 2}
METHODS: dict[str, Spec] = {
    "itq": Spec(None, budget={"n_iter": 20}),
    "kmh": Spec(None, seeded=False, budget={"n_iter": 10}),
    "ksh": Spec("label", budget=KSH_BUDGET),
    "ksh+h": Spec("hierarchical", budget=KSH_BUDGET),
    "lfh": Spec("label", budget={"n_iter": 10, "n_sampled": 64}),
    "cosdish": Spec("label", budget=COSDISH_BUDGET),
    "cosdish+h": Spec("hierarchical", budget=COSDISH_BUDGET),
    "dpsh": Spec("label", "images", budget=TINY_NET, acg_gain=0.8),
    "dsh": Spec("label", "images", budget={**TINY_NET, "epochs": 3}, acg_gain=0.6),
    "hashnet": Spec("label", "images", budget=TINY_NET, acg_gain=0.8),
    "dch": Spec("label", "images", budget={**TINY_NET, "epochs": 3}, acg_gain=0.8),
    "dtsh": Spec("label", "images", budget=TINY_NET, acg_gain=0.8),
    "dpsh+h": Spec("hierarchical", "images", budget=TINY_NET, acg_gain=0.8),
    "hashnet+h": Spec("hierarchical", "images", budget=TINY_NET, acg_gain=0.7),
    "shdh": Spec("hierarchical", "images", level_segments=True, budget=TINY_NET, acg_gain=0.8),
    "greedyhash": Spec("label", "images", budget=TINY_NET, acg_gain=0.8),
    "csq": Spec("label", "images", budget=TINY_NET, acg_gain=0.8),
    "orthohash": Spec("label", "images", budget=TINY_NET, acg_gain=0.6),
    "hpdh": Spec("hierarchical", "images", budget={**TINY_NET, "epochs": 3}, acg_gain=0.4),
    "oracle": Spec(
        "hierarchical",
        "images",
        level_segments=True,
        budget={**TINY_NET, "epochs": 3, "lr": 0.05},
        acg_gain=0.5,
    ),
}


class _OtherMethod(Hasher):
    """Stands for "some other method" when loading a saved model as the wrong one."""

    name: ClassVar[str] = "other-method"


def _make(name: str, work_dir, **params) -> Hasher:
    """The method with the toy budget (n_bits=16, seed=7 unless params say otherwise)."""
    spec = METHODS[name]
    cls = hasher_class(name)  # a missing module fails here
    if spec.inputs == "images":  # checkpoints in the test's folder, not in a shared temp dir
        params["work_dir"] = str(work_dir)
    params = {"n_bits": N_BITS, "seed": 7, **spec.budget, **params}
    return deep_hasher(cls, **params) if spec.inputs == "images" else cls(**params)


def _pairs(name: str, ancestors: np.ndarray, mode: str | None = None) -> PairSimilarity | None:
    mode = mode or METHODS[name].supervision
    return None if mode is None else PairSimilarity(ancestors, U, mode)


@dataclass
class Case:
    """One method fitted on the toy set, shared by the read-only checks of that method."""

    name: str
    hasher: Hasher
    X: np.ndarray  # training (database) items: features or images, as the method takes them
    Q: np.ndarray  # queries
    pairs: PairSimilarity | None
    db_anc: np.ndarray
    q_anc: np.ndarray
    codes: np.ndarray  # of Q


def _inputs(name: str, seed: int, per_leaf: int) -> tuple[np.ndarray, np.ndarray]:
    feats, images, anc = tree_set(seed=seed, per_leaf=per_leaf)
    return (images if METHODS[name].inputs == "images" else feats), anc


@pytest.fixture(scope="module", params=list(DECLARED_BY_NAME))
def case(request, tmp_path_factory) -> Case:
    name = request.param
    X, db_anc = _inputs(name, seed=1, per_leaf=40)
    Q, q_anc = _inputs(name, seed=2, per_leaf=10)
    hasher, pairs = _make(name, tmp_path_factory.mktemp("work")), _pairs(name, db_anc)
    assert hasher.fit(X, pairs) is hasher
    return Case(name, hasher, X, Q, pairs, db_anc, q_anc, hasher.encode(Q))


# --- without a fit -----------------------------------------------------------------------------


def test_every_registered_method_has_a_spec() -> None:
    assert METHODS.keys() == DECLARED_BY_NAME.keys()
    known = re.escape(", ".join(DECLARED_BY_NAME))
    with pytest.raises(ValueError, match=rf"^unknown method 'nope' \(known: {known}\)$"):
        hasher_class("nope")


@pytest.mark.parametrize("name", list(DECLARED_BY_NAME))
def test_catalogue_entry(name: str) -> None:
    cls, spec, declared = hasher_class(name), METHODS[name], DECLARED_BY_NAME[name]
    assert (cls.__module__, cls.__qualname__) == (declared.module, declared.class_name)
    assert issubclass(cls, Hasher) and cls.name == name
    defaults = dataclasses.asdict(declared.settings())
    if declared.deep:  # its settings object, made from the declared dataclass
        assert cls(n_bits=N_BITS).settings == declared.settings()
    else:  # the constructor's defaults are its declared settings' (not a copy)
        assert cls.supports(N_BITS, **defaults) and cls.supports(N_BITS, **spec.budget)
        signature = inspect.signature(cls.__init__).parameters
        assert {key: signature[key].default for key in defaults} == defaults
    assert (cls.supervision, cls.input_kind) == (spec.supervision, spec.inputs)


@pytest.mark.parametrize("name", list(DECLARED_BY_NAME))
def test_constructor_takes_keyword_only_parameters_and_does_no_work(name: str) -> None:
    cls = hasher_class(name)
    named = [p for p in inspect.signature(cls.__init__).parameters.values() if p.name != "self"]
    assert {"n_bits", "seed"} <= {p.name for p in named}
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in named)
    with pytest.raises(TypeError):
        cls(8)
    hasher = cls(n_bits=8, seed=1)
    expected = {p.name: p.default for p in named} | {"n_bits": 8, "seed": 1}
    if DECLARED_BY_NAME[name].deep:  # settings=None stands for the declared defaults, as an object
        expected["settings"] = DECLARED_BY_NAME[name].settings()
    assert hasher.get_params() == expected
    assert cls(**hasher.get_params()).get_params() == expected  # the parameters rebuild it
    assert not hasher.is_fitted()


@pytest.mark.parametrize("name", list(DECLARED_BY_NAME))
def test_refuses_to_work_before_fit(name: str, tmp_path) -> None:
    hasher = _make(name, tmp_path / "work")
    Q, _ = _inputs(name, seed=2, per_leaf=2)
    with pytest.raises(NotFittedError, match=rf"^{re.escape(name)}: call fit\(\)"):
        hasher.encode(Q)
    with pytest.raises(NotFittedError):
        hasher.save(tmp_path / "unfitted")
    assert not (tmp_path / "unfitted").exists()
    if METHODS[name].level_segments:  # the segments follow the tree it is fitted to
        for segments in (hasher.segment_sizes, hasher.segment_weights):
            with pytest.raises(NotFittedError):
                segments()
    else:
        assert (hasher.segment_sizes(), hasher.segment_weights()) == ([N_BITS], [1.0])


@pytest.mark.parametrize("name", list(DECLARED_BY_NAME))
def test_n_bits_below_one_is_refused(name: str, tmp_path) -> None:
    X, anc = _inputs(name, seed=1, per_leaf=2)
    hasher = _make(name, tmp_path / "work", n_bits=0)
    with pytest.raises(ValueError, match=rf"^{re.escape(name)}: n_bits must be >= 1, got 0$"):
        hasher.fit(X, _pairs(name, anc))
    assert not hasher.is_fitted()


SUPERVISED = [name for name, spec in METHODS.items() if spec.supervision]


@pytest.mark.parametrize("name", SUPERVISED)
def test_missing_or_wrong_pair_labels_are_refused(name: str, tmp_path) -> None:
    X, anc = _inputs(name, seed=1, per_leaf=2)
    mode = METHODS[name].supervision
    other = "label" if mode == "hierarchical" else "hierarchical"
    hasher = _make(name, tmp_path / "work")
    who = re.escape(name)
    with pytest.raises(ValueError, match=rf"^{who}: supervised method needs pair labels"):
        hasher.fit(X)
    with pytest.raises(ValueError, match=rf"^{who}: needs '{mode}' pair labels, got '{other}'"):
        hasher.fit(X, _pairs(name, anc, other))
    with pytest.raises(ValueError, match=rf"^{who}: pairs cover {len(X)} items but X has "):
        hasher.fit(X[:-1], _pairs(name, anc))
    assert not hasher.is_fitted()


# --- on a fitted model -------------------------------------------------------------------------


def test_codes_and_segments(case: Case) -> None:
    hasher = case.hasher
    assert case.codes.shape == (len(case.Q), N_BITS) and case.codes.dtype == np.int8
    assert set(np.unique(case.codes)) == {-1, 1}
    db_codes = hasher.encode(case.X)
    assert db_codes.shape == (len(case.X), N_BITS) and db_codes.dtype == np.int8
    sizes, weights = hasher.segment_sizes(), hasher.segment_weights()
    if METHODS[case.name].level_segments:  # K = 3: the root level carries no bits
        assert sizes == [8, 8] and weights == pytest.approx([U[1], U[2]])
    else:
        assert (sizes, weights) == ([N_BITS], [1.0])


def test_deterministic_under_a_seed(case: Case, tmp_path) -> None:
    name, state = case.name, case.hasher.state()
    again = _make(name, tmp_path / "again").fit(case.X, case.pairs)
    assert again.state().keys() == state.keys()
    for key, value in again.state().items():
        np.testing.assert_array_equal(value, state[key], err_msg=f"{name}: {key} differs")
    np.testing.assert_array_equal(again.encode(case.Q), case.codes)
    other = _make(name, tmp_path / "other", seed=8).fit(case.X, case.pairs)
    if METHODS[name].seeded:
        assert not np.array_equal(other.encode(case.Q), case.codes), f"{name}: seed unused"
    else:  # e.g. KMH: a PCA start and ties to the lower index, nothing drawn at random
        for key, value in other.state().items():
            np.testing.assert_array_equal(value, state[key], err_msg=f"{name}: {key} differs")


def test_save_load_round_trip(case: Case, tmp_path) -> None:
    hasher = case.hasher
    saved = hasher.save(tmp_path / "model")
    meta = json.loads((saved / "params.json").read_text())
    # params.json holds each parameter as JSON: a deep method's LoopSettings as its fields
    params = {
        k: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v
        for k, v in hasher.get_params().items()
    }
    assert meta == {"format": FORMAT, "method": case.name, "params": params}
    with np.load(saved / "state.npz", allow_pickle=False) as arrays:
        assert sorted(arrays.files) == sorted(hasher.state())
    for loader in (load_hasher, type(hasher).load):
        loaded = loader(saved)
        assert type(loaded) is type(hasher)
        assert model_params(loaded) == model_params(hasher)
        for key, value in loaded.state().items():
            np.testing.assert_array_equal(value, hasher.state()[key], err_msg=key)
        np.testing.assert_array_equal(loaded.encode(case.Q), case.codes)
        assert loaded.segment_sizes() == hasher.segment_sizes()
        assert loaded.segment_weights() == hasher.segment_weights()


def test_load_refuses_a_model_that_does_not_fit(case: Case, tmp_path) -> None:
    """Loaded as another method, with another bit length, or with a learned array missing."""
    name, hasher = case.name, case.hasher
    saved = hasher.save(tmp_path / "model")
    with pytest.raises(TypeError, match="shdh.hashers.load_hasher"):
        Hasher.load(saved)  # the base class does not guess the method: load_hasher reads it
    with pytest.raises(ValueError, match=f"holds method '{re.escape(name)}', not 'other-method'"):
        _OtherMethod.load(saved)
    state = dict(np.load(saved / "state.npz"))
    for key in [k for k in state if not k.startswith("net.")]:
        np.savez(saved / "state.npz", **{k: v for k, v in state.items() if k != key})
        with pytest.raises(ValueError, match=rf"(lacks the arrays?|missing fields) .*'{key}'"):
            load_hasher(saved)
    np.savez(saved / "state.npz", **state)
    meta = json.loads((saved / "params.json").read_text())
    meta["params"]["n_bits"] = 2 * N_BITS
    (saved / "params.json").write_text(json.dumps(meta))
    with pytest.raises(ValueError, match=rf"\bn_bits={2 * N_BITS}\b") as refused:
        load_hasher(saved)
    # the file that does not fit, so that the user knows what to fit again
    assert str(refused.value).startswith(f"{saved / 'state.npz'}: ")


def _acg_ndcg(q_codes, db_codes, q_anc, db_anc, sizes, weights) -> tuple[float, float]:
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
    return metrics[f"acg@{TOP_N}"], metrics[f"ndcg@{TOP_N}"]


def test_retrieves_better_than_random_codes(case: Case) -> None:
    """Relevance is the number of levels shared below the root (0, 1 or 2), so random codes
    score about 1/3 + 1/9 = 0.44 ACG here: a third of the items share the superclass, a ninth
    the class too."""
    hasher = case.hasher
    db_codes = hasher.encode(case.X)
    sizes, weights = hasher.segment_sizes(), hasher.segment_weights()
    acg, ndcg = _acg_ndcg(case.codes, db_codes, case.q_anc, case.db_anc, sizes, weights)
    rng = np.random.default_rng(0)
    random_db = np.where(rng.random(db_codes.shape) < 0.5, 1, -1).astype(np.int8)
    random_q = np.where(rng.random(case.codes.shape) < 0.5, 1, -1).astype(np.int8)
    chance = _acg_ndcg(random_q, random_db, case.q_anc, case.db_anc, [N_BITS], [1.0])
    gain = METHODS[case.name].acg_gain
    assert acg > chance[0] + gain, f"{case.name}: ACG@{TOP_N} {acg:.3f}, random {chance[0]:.3f}"
    assert ndcg > chance[1] + 0.1, f"{case.name}: NDCG@{TOP_N} {ndcg:.3f}, random {chance[1]:.3f}"


# --- bad input ---------------------------------------------------------------------------------

FEATURES = [name for name, spec in METHODS.items() if spec.inputs == "features"]
IMAGES = [name for name, spec in METHODS.items() if spec.inputs == "images"]


def _refuses(hasher: Hasher, message: str, method: str, *args) -> None:
    fitted = hasher.is_fitted()
    with pytest.raises(ValueError, match=message):
        getattr(hasher, method)(*args)
    assert hasher.is_fitted() == fitted  # a refused fit leaves no state behind


@pytest.mark.parametrize("case", FEATURES, indirect=True)
def test_bad_features_are_refused_by_name(case: Case, tmp_path) -> None:
    who, fitted, X = re.escape(case.name), case.hasher, case.X
    fresh = _make(case.name, tmp_path / "work")
    for value, kind in ((np.nan, "NaN"), (np.inf, "inf"), (-np.inf, "inf")):
        broken = X.copy()
        broken[7, 3] = value
        message = rf"^{who}: features X contain {kind} \(first at row 7, column 3\)"
        _refuses(fresh, message, "fit", broken, case.pairs)
        _refuses(fitted, message, "encode", broken)
    malformed = [
        ("must be a 2-D", np.zeros(len(X))),
        ("must be non-empty", np.zeros((len(X), 0))),
        ("must be real numbers", X.astype(complex)),
        ("must be real numbers", X.astype(str)),
    ]
    for problem, bad in malformed:
        _refuses(fresh, rf"^{who}: features X {problem}", "fit", bad, case.pairs)
        _refuses(fitted, rf"^{who}: features X {problem}", "encode", bad)
    d = X.shape[1]
    message = rf"^{who}: features X have {d - 1} dimensions, the model was fitted on {d}$"
    _refuses(fitted, message, "encode", X[:, 1:])


@pytest.mark.parametrize("case", IMAGES, indirect=True)
def test_bad_images_are_refused_by_name(case: Case, tmp_path) -> None:
    who, fitted, X = re.escape(case.name), case.hasher, case.X
    fresh = _make(case.name, tmp_path / "work")
    message = rf"^{who}: images must be a uint8 \(N, H, W\[, C\]\) array, got "
    for bad in (X.astype(np.float32), X.reshape(len(X), -1), list(X)):
        _refuses(fresh, message, "fit", bad, case.pairs)
        _refuses(fitted, message, "encode", bad)
    _refuses(fresh, rf"^{who}: images are empty", "fit", X[:0], _pairs(case.name, case.db_anc[:0]))
    h, w = X.shape[1:]
    message = rf"^{who}: images have shape \({h + 2}, {w + 2}\) per item but the model was "
    other = np.zeros((3, h + 2, w + 2), np.uint8)
    _refuses(fitted, message + rf"trained on \({h}, {w}\)$", "encode", other)
