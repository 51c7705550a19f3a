"""SHDH and DPSH's own behaviour: the training diagnostics, SHDH's segment layouts, the saved
network, checkpoints and resume, and how their parameters map onto the training loop's. The
common contract (codes, seeds, save/load, pair labels, bad images) is test_hashers_contract.py's.
"""

import dataclasses
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from shdh.core.level_weights import layer_weights
from shdh.hashers import hasher_class, load_hasher
from shdh.hashers.base import Hasher
from shdh.hashers.deep_record import RUN_FILE
from shdh.hashers.dpsh import DPSH
from shdh.hashers.method_settings import DPSHSettings, SHDHSettings
from shdh.hashers.shdh import SHDH
from shdh.hashers.supervision import PairSimilarity
from shdh.training.checkpoint import CHECKPOINT_NAME
from shdh.training.loop_settings import LoopSettings, TrainConfig
from tests.unit.toys import deep_hasher, model_params

pytestmark = pytest.mark.usefixtures("one_torch_thread")

U = layer_weights(3)  # (0, 2/3, 1/3)
TINY = {"n_bits": 16, "width": 1 / 16, "image_size": 8, "batch_size": 16, "device": "cpu"}
MODES = {"shdh": "hierarchical", "dpsh": "label"}


def _toy(n_per_leaf: int, noise_seed: int) -> tuple[np.ndarray, np.ndarray]:
    """8x8 images of a K = 3 tree: root 0; superclasses 1, 2; leaves 3, 4 (under 1), 5, 6.

    Each image is a fixed pattern of its superclass plus one of its leaf, plus fresh noise."""
    patterns = np.random.default_rng(0)
    sc_pattern, leaf_pattern = patterns.normal(size=(2, 8, 8)), patterns.normal(size=(4, 8, 8))
    rng = np.random.default_rng(noise_seed)
    images, anc = [], []
    for leaf in range(4):
        x = sc_pattern[leaf // 2] + leaf_pattern[leaf] + 0.5 * rng.normal(size=(n_per_leaf, 8, 8))
        images.append(np.clip(128 + 40 * x, 0, 255).astype(np.uint8))
        anc += [[0, 1 + leaf // 2, 3 + leaf]] * n_per_leaf
    order = rng.permutation(4 * n_per_leaf)  # never class-sorted
    return np.concatenate(images)[order], np.array(anc)[order]


TRAIN = _toy(24, noise_seed=1)
QUERIES = _toy(8, noise_seed=2)


def _pairs(method: str, anc: np.ndarray = TRAIN[1]) -> PairSimilarity:
    return PairSimilarity(anc, U, MODES[method])


def _fit(method: str, data=TRAIN, **params) -> Hasher:
    hasher = deep_hasher(hasher_class(method), **(TINY | {"epochs": 3} | params))
    return hasher.fit(data[0], _pairs(method, data[1]))


@pytest.fixture(scope="module")
def fitted() -> dict[str, Hasher]:
    return {method: _fit(method) for method in MODES}


@pytest.mark.parametrize("method", MODES)
def test_training_diagnostics(method: str, fitted) -> None:
    hasher = fitted[method]
    assert [h["epoch"] for h in hasher.history_] == [1, 2, 3]
    for entry in hasher.history_:  # both losses must visibly train
        assert 0 <= entry["flip_fraction"] <= 1 and 0 <= entry["bit_balance"] <= 1
        assert np.isfinite(entry["e1"]) and np.isfinite(entry["e2"])
    assert hasher.history_[0]["flip_fraction"] > 0  # the codes moved


def test_paper_layout_segments() -> None:
    """The paper's layout gives the root a segment too, of weight u_1 = 0 (the default layout,
    one segment per level below the root, is the contract's)."""
    paper = _fit("shdh", epochs=1, layout="paper", n_bits=17)
    assert paper.segment_sizes() == [5, 5, 7]
    assert paper.segment_weights() == pytest.approx([0.0, 2 / 3, 1 / 3])


@pytest.mark.parametrize("method", MODES)
def test_saved_state_holds_the_network_and_the_tree(method: str, fitted, tmp_path: Path) -> None:
    fitted[method].save(tmp_path / "m")
    with np.load(tmp_path / "m" / "state.npz", allow_pickle=False) as arrays:
        assert "net.head.weight" in arrays.files and int(arrays["K_"]) == 3


def test_load_refuses_the_state_of_another_bit_length_or_width(fitted, tmp_path: Path) -> None:
    fitted["dpsh"].save(tmp_path / "dpsh")
    other_bits = _fit("dpsh", epochs=1, n_bits=8)
    other_bits.save(tmp_path / "dpsh8")
    shutil.copy(tmp_path / "dpsh8" / "state.npz", tmp_path / "dpsh" / "state.npz")
    with pytest.raises(ValueError, match=r"state\.npz: .*8 bits but params\.json has n_bits=16"):
        DPSH.load(tmp_path / "dpsh")
    fitted["shdh"].save(tmp_path / "shdh")
    params = json.loads((tmp_path / "shdh" / "params.json").read_text())
    params["params"]["loop"]["width"] = 0.25
    (tmp_path / "shdh" / "params.json").write_text(json.dumps(params))
    with pytest.raises(
        ValueError, match="network weights do not fit shdh with backbone=cnnf, width=0.25"
    ):
        SHDH.load(tmp_path / "shdh")


@pytest.mark.parametrize("method", MODES)
def test_resume_continues_to_the_same_model(method: str, fitted, tmp_path: Path) -> None:
    first = _fit(method, epochs=1, work_dir=str(tmp_path))
    assert (tmp_path / CHECKPOINT_NAME).is_file() and (tmp_path / RUN_FILE).is_file()
    resumed = deep_hasher(hasher_class(method), **(TINY | {"epochs": 3, "work_dir": str(tmp_path)}))
    resumed.fit(TRAIN[0], _pairs(method), resume="always")
    assert resumed.history_[0] == first.history_[0]  # epoch 1 was not retrained
    np.testing.assert_array_equal(resumed.encode(QUERIES[0]), fitted[method].encode(QUERIES[0]))
    with pytest.raises(ValueError, match="would replace work_dir"):
        resumed.save(tmp_path)  # save() swaps the whole directory: the checkpoint would go


def test_resume_refuses_other_parameters_or_data(tmp_path: Path) -> None:
    small = (TRAIN[0][:32], TRAIN[1][:32])
    _fit("dpsh", data=small, epochs=1, work_dir=str(tmp_path))
    other_eta = deep_hasher(DPSH, **(TINY | {"epochs": 1, "eta": 1.0, "work_dir": str(tmp_path)}))
    with pytest.raises(ValueError, match=r"hasher\.json: cannot resume: parameter 'eta'"):
        other_eta.fit(small[0], _pairs("dpsh", small[1]), resume="always")
    other_lr = deep_hasher(DPSH, **(TINY | {"epochs": 1, "lr": 0.5, "work_dir": str(tmp_path)}))
    with pytest.raises(ValueError, match=r"cannot resume: parameter 'loop\.lr' is .* but 0\.5 now"):
        other_lr.fit(small[0], _pairs("dpsh", small[1]), resume="always")
    flipped = small[0][::-1].copy()
    same_params = deep_hasher(DPSH, **(TINY | {"epochs": 1, "work_dir": str(tmp_path)}))
    with pytest.raises(ValueError, match="field 'data_sha256'"):
        same_params.fit(flipped, _pairs("dpsh", small[1]), resume="always")
    other_eta.fit(small[0], _pairs("dpsh", small[1]), resume="auto")  # retrains afresh
    record = json.loads((tmp_path / RUN_FILE).read_text())
    assert record["params"]["eta"] == 1.0 and record["method"] == "dpsh"


def test_params_map_onto_train_config() -> None:
    """The deep hashers take the loop settings as one LoopSettings and their own as one settings
    object, whose defaults the loop's config and the losses share; every parameter reaches the
    config or the objective."""
    for cls, settings_class in ((SHDH, SHDHSettings), (DPSH, DPSHSettings)):
        assert cls(n_bits=8).get_params()["loop"] == LoopSettings()
        assert cls(n_bits=8).get_params()["settings"] == settings_class()
        config = cls(n_bits=8, loop={"epochs": 2}).train_config()  # a saved params.json's form
        assert config == TrainConfig(n_bits=8, epochs=2)
    shdh = deep_hasher(
        SHDH, n_bits=8, layout="paper", alpha=0.1, e2="trace", lr=0.05, width=0.5, epochs=3
    )
    config, settings = shdh.train_config(), shdh.get_params()["settings"]
    assert settings == SHDHSettings(alpha=0.1, e2="trace", layout="paper")
    assert (config.lr, config.width, config.epochs) == (0.05, 0.5, 3)
    assert not config.memory_bank
    dpsh = deep_hasher(DPSH, n_bits=8, reduction="mean", grad_clip=0.0, memory_bank=True)
    assert dpsh.train_config().memory_bank and dpsh.train_config().grad_clip == 0.0
    assert dpsh.settings == DPSHSettings(reduction="mean", memory_bank=True)
    assert DPSH(n_bits=8, settings={"eta": 1}).settings == DPSHSettings(eta=1)  # params.json


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: deep_hasher(DPSH, **TINY, eta=-1.0), r"dpsh: DPSHSettings\.eta must be"),
        (lambda: deep_hasher(DPSH, **TINY, eta=float("nan")), r"dpsh: DPSHSettings\.eta must"),
        (lambda: deep_hasher(SHDH, **(TINY | {"lr": 0.0})), r"LoopSettings\.lr is out of range"),
        (
            lambda: deep_hasher(SHDH, **TINY, e1="bogus"),
            r"shdh: SHDHSettings\.e1 must be one of levels, matrix, got 'bogus'",
        ),
        # A value of the wrong kind (from a command line or a hand-made mapping) is named, not
        # left to fail in a comparison.
        (lambda: deep_hasher(SHDH, **(TINY | {"epochs": "3"})), r"epochs must be an integer"),
        (lambda: deep_hasher(SHDH, **(TINY | {"epochs": 2.5})), r"epochs must be an integer"),
        (lambda: deep_hasher(SHDH, **(TINY | {"augment": "no"})), r"augment must be true or"),
        (lambda: deep_hasher(SHDH, **(TINY | {"lr": True})), r"lr must be a number, got True"),
    ],
)
def test_bad_parameters_are_refused_when_made(make, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        make()


def test_the_settings_are_the_settings_object_or_a_mapping_of_its_fields() -> None:
    """A mapping is what a saved params.json gives: it becomes the method's settings object."""
    made = SHDH(n_bits=8, settings={"alpha": 0.5, "target": "binary"}).settings
    assert made == SHDHSettings(alpha=0.5, target="binary")
    assert DPSH(n_bits=8, settings={}).settings == DPSHSettings()
    assert SHDH(n_bits=8, settings=SHDHSettings(e1="matrix")).settings.e1 == "matrix"


@pytest.mark.parametrize(
    ("cls", "settings", "message"),
    [
        (SHDH, {"alpha": "0.5"}, r"shdh: SHDHSettings\.alpha must be a number >= 0, got '0.5'"),
        (SHDH, {"alpha": float("inf")}, r"shdh: SHDHSettings\.alpha must be a number >= 0"),
        (SHDH, {"alfa": 0.5}, r"shdh: settings: unknown settings \['alfa'\] \(known: \['layout'"),
        (DPSH, {"alpha": 1.0}, r"dpsh: settings: unknown settings \['alpha'\] \(known: \['eta'"),
        (DPSH, {"eta": True}, r"dpsh: DPSHSettings\.eta must be a number >= 0, got True"),
        (DPSH, {"reduction": "max"}, r"dpsh: DPSHSettings\.reduction must be one of sum, mean"),
        (DPSH, SHDHSettings(), "dpsh: settings: expected DPSHSettings or a mapping, got SHDH"),
        (SHDH, 1.0, "shdh: settings: expected SHDHSettings or a mapping, got 1.0"),
    ],
)
def test_bad_settings_are_refused_when_made(cls, settings, message: str) -> None:
    """Checked at construction, before any work, naming the method and the field."""
    with pytest.raises(ValueError, match=message):
        cls(n_bits=8, settings=settings)


def test_a_model_trained_on_a_card_loads_to_encode_on_any_device(fitted, tmp_path: Path) -> None:
    saved = fitted["shdh"].save(tmp_path / "m")
    meta = json.loads((saved / "params.json").read_text())
    meta["params"]["loop"].update(device="cuda", num_threads=16, compile=True, cuda_graph=True)
    (saved / "params.json").write_text(json.dumps(meta))
    loaded = load_hasher(saved)
    assert loaded.loop.device == "auto" and loaded.loop.num_threads is None
    assert not loaded.loop.compile and not loaded.loop.cuda_graph
    np.testing.assert_array_equal(loaded.encode(QUERIES[0]), fitted["shdh"].encode(QUERIES[0]))


@pytest.mark.parametrize("method", MODES)
def test_a_saved_model_round_trips_its_settings(method: str, tmp_path: Path) -> None:
    """params.json holds the settings as their fields, and loading gives the same settings back;
    a params.json that names a setting the method does not have, or a bad value, is refused by
    name."""
    settings = {"shdh": SHDHSettings(alpha=0.5, e2="trace"), "dpsh": DPSHSettings(eta=2.5)}
    hasher = _fit(method, epochs=1, **dataclasses.asdict(settings[method]))
    assert hasher.settings == settings[method]
    saved = hasher.save(tmp_path / "m")
    meta = json.loads((saved / "params.json").read_text())
    assert meta["params"]["settings"] == dataclasses.asdict(settings[method])
    loaded = load_hasher(saved)
    assert loaded.settings == settings[method] and model_params(loaded) == model_params(hasher)
    np.testing.assert_array_equal(loaded.encode(QUERIES[0]), hasher.encode(QUERIES[0]))
    bad = {**meta["params"], "settings": {**meta["params"]["settings"], "alfa": 1.0}}
    (saved / "params.json").write_text(json.dumps({**meta, "params": bad}))
    with pytest.raises(ValueError, match=r"params\.json: field 'params': .*'alfa'"):
        load_hasher(saved)
    bad = {**meta["params"], "settings": {**meta["params"]["settings"], "reduction": "x"}}
    (saved / "params.json").write_text(json.dumps({**meta, "params": bad}))
    with pytest.raises(ValueError, match=r"params\.json: field 'params': .*reduction must be"):
        load_hasher(saved)


def test_bad_resume_options() -> None:
    with pytest.raises(ValueError, match="resume='always' needs work_dir"):
        deep_hasher(DPSH, **TINY).fit(TRAIN[0], _pairs("dpsh"), resume="always")
    with pytest.raises(ValueError, match="resume must be one of"):
        deep_hasher(DPSH, **TINY).fit(TRAIN[0], _pairs("dpsh"), resume=True)
