import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from shdh.hashers.method_settings import SHDHSettings
from shdh.hashers.shdh import shdh_objective
from shdh.nets.hashing import build_model
from shdh.runtime.devices import resolve_device
from shdh.training.checkpoint import load_checkpoint
from shdh.training.inference import encode
from shdh.training.loop import TrainingDivergedError, train
from shdh.training.loop_settings import TrainConfig
from shdh.training.objective import Objective

pytestmark = pytest.mark.usefixtures("one_torch_thread")

# K = 3 tree: root 0; superclasses 1, 2; leaves 3, 4 (under 1) and 5, 6 (under 2).
SIZES, LEVELS, U = [8, 8], [2, 3], [0.0, 2 / 3, 1 / 3]
LAYOUT = {"segment_sizes": SIZES, "segment_levels": LEVELS, "layer_weights": U}
LOSS = shdh_objective(SIZES, LEVELS, U)
RUN = LAYOUT | {"objective": LOSS}  # what train() needs besides the config and the data
TINY = {"n_bits": 16, "width": 1 / 16, "image_size": 8, "batch_size": 16, "device": "cpu"}
TIMING_KEYS = ("seconds", "images_per_sec")


class Spied(Objective):
    """SHDH's objective with `step(z, anc, bank)` in its place: a test sees, or changes, what
    the loop hands the objective and what it gets back."""

    name = "shdh"

    def __init__(self, step) -> None:
        super().__init__(LOSS.settings, LOSS.task)
        self.step = step

    def forward(self, z, anc, bank=None):
        return self.step(z, anc, bank)


def _toy(n_per_leaf: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """8x8 images: a random pattern per superclass plus one per leaf, plus noise."""
    rng = np.random.default_rng(seed)
    sc_pattern, leaf_pattern = rng.normal(size=(2, 8, 8)), rng.normal(size=(4, 8, 8))
    images, anc = [], []
    for leaf in range(4):
        x = sc_pattern[leaf // 2] + leaf_pattern[leaf] + 0.5 * rng.normal(size=(n_per_leaf, 8, 8))
        images.append(np.clip(128 + 40 * x, 0, 255).astype(np.uint8))
        anc += [[0, 1 + leaf // 2, 3 + leaf]] * n_per_leaf
    return np.concatenate(images), np.array(anc)


def _weighted_hamming(codes: np.ndarray, a: np.ndarray, b: np.ndarray) -> float:
    differ = codes[a] != codes[b]  # (pairs, L)
    return float((U[1] * differ[:, :8].sum(1) + U[2] * differ[:, 8:].sum(1)).mean())


def _train(out: Path, data=None, **over):
    images, anc = data if data is not None else _toy(16)
    config = TrainConfig(**(TINY | {"epochs": 2} | over.pop("config", {})))
    progress = over.pop("progress", None)
    return train(
        config, images, anc, np.arange(len(images)), out, progress=progress, **(RUN | over)
    )


def test_toy_hierarchy_trains(tmp_path: Path) -> None:
    images, anc = _toy(48)
    config = TrainConfig(**(TINY | {"epochs": 8, "batch_size": 32}))
    result = train(config, images, anc, np.arange(len(images)), tmp_path, progress=None, **RUN)
    hist = result.history
    assert [h["epoch"] for h in hist] == list(range(1, 9))
    assert hist[-1]["loss"] < 0.5 * hist[0]["loss"]
    assert hist[-1]["mean_abs_z"] > hist[0]["mean_abs_z"]  # left the h~ = 0 saddle
    codes = encode(result.model, images)
    i, j = np.triu_indices(len(images), 1)
    same_leaf = anc[i, 2] == anc[j, 2]
    siblings = (anc[i, 1] == anc[j, 1]) & ~same_leaf
    other_tree = anc[i, 1] != anc[j, 1]
    d_other = _weighted_hamming(codes, i[other_tree], j[other_tree])
    assert _weighted_hamming(codes, i[same_leaf], j[same_leaf]) < 0.25 * d_other
    assert _weighted_hamming(codes, i[siblings], j[siblings]) < 0.25 * d_other


def test_history_diagnostics_and_on_epoch(tmp_path: Path) -> None:
    seen = []
    result = _train(tmp_path, on_epoch=seen.append)
    assert seen == result.history and len(seen) == 2
    for entry in seen:
        assert set(entry) == {
            "epoch",
            "loss",
            "e1",
            "e2",
            "lr",
            "seconds",
            "images_per_sec",
            "mean_abs_z",
            "flip_fraction",
            "bit_balance",
        }
        assert math.isclose(entry["loss"], entry["e1"] + entry["e2"], rel_tol=1e-5)
        assert 0 <= entry["flip_fraction"] <= 1 and 0 <= entry["bit_balance"] <= 1
        assert entry["images_per_sec"] > 0 and entry["lr"] == 0.01
    assert sorted(p.name for p in tmp_path.iterdir()) == ["checkpoint.pt"]  # no temp files left


class _Bar:
    """A progress bar that records what the loop tells it."""

    made: list[tuple[int, str]] = []

    def __init__(self, total: int, desc: str) -> None:
        self.made.append((total, desc))
        self.steps, self.closed = 0, False

    def update(self, n: int = 1) -> None:
        self.steps += n

    def set_postfix(self, **kwargs) -> None:
        assert "loss" in kwargs

    def close(self) -> None:
        self.closed = True


def test_lr_decays_per_epoch_and_each_epoch_has_its_bar(tmp_path: Path) -> None:
    _Bar.made.clear()
    result = _train(
        tmp_path, config={"epochs": 3, "lr_decay_every": 2, "lr_decay": 0.5}, progress=_Bar
    )
    assert [h["lr"] for h in result.history] == [0.01, 0.01, 0.005]
    # 64 items in batches of 16: 4 steps an epoch, each epoch a bar of its own
    assert _Bar.made == [(4, "epoch 1/3"), (4, "epoch 2/3"), (4, "epoch 3/3")]


def test_rng_and_threads_left_as_found(tmp_path: Path) -> None:
    state, threads = torch.get_rng_state(), torch.get_num_threads()
    _train(tmp_path, config={"epochs": 1, "num_threads": 2})
    assert torch.equal(torch.get_rng_state(), state)
    assert torch.get_num_threads() == threads


def test_encode_runs_on_the_pinned_thread_count_and_restores_it(monkeypatch) -> None:
    """Codes must not depend on the caller's thread count, so encode pins it when asked."""
    images, _ = _toy(2)
    model = build_model(n_bits=16, width=1 / 16, in_channels=1)
    seen = []
    real_forward = model.forward
    monkeypatch.setattr(
        model, "forward", lambda x: (seen.append(torch.get_num_threads()), real_forward(x))[1]
    )
    before = torch.get_num_threads()  # 1, from the module's fixture
    encode(model, images, num_threads=2)
    assert seen and set(seen) == {2} and torch.get_num_threads() == before
    seen.clear()
    encode(model, images)  # None: the caller's count
    assert set(seen) == {before}


@pytest.mark.parametrize("memory_bank", [False, True])
def test_resume_is_bit_identical(tmp_path: Path, memory_bank: bool) -> None:
    data = _toy(16)
    straight = _train(tmp_path / "a", data, config={"epochs": 3, "memory_bank": memory_bank})
    _train(tmp_path / "b", data, config={"epochs": 2, "memory_bank": memory_bank})
    resumed = _train(
        tmp_path / "b", data, config={"epochs": 3, "memory_bank": memory_bank}, resume="always"
    )
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert np.array_equal(encode(straight.model, data[0]), encode(resumed.model, data[0]))
    strip = [{k: v for k, v in h.items() if k not in TIMING_KEYS} for h in straight.history]
    assert strip == [{k: v for k, v in h.items() if k not in TIMING_KEYS} for h in resumed.history]
    _, config, ckpt = load_checkpoint(resumed.checkpoint_path)
    assert ckpt["epoch"] == 3 and config.epochs == 3
    # A finished run resumed with the same epochs returns it without training.
    again = _train(
        tmp_path / "b", data, config={"epochs": 3, "memory_bank": memory_bank}, resume="always"
    )
    assert again.history == resumed.history


def test_memory_bank_pairs_with_other_items(tmp_path: Path) -> None:
    images, anc = _toy(8)  # 32 items, batches of 16
    config = TrainConfig(**(TINY | {"epochs": 2, "memory_bank": True}))
    inner = LOSS
    bank_sizes = []

    def spy(z, anc_batch, bank):
        bank_sizes.append(len(bank[0]))
        assert len(bank[1]) == len(bank[0]) and not bank[0].requires_grad
        return inner(z, anc_batch, bank)

    train(
        config, images, anc, np.arange(32), tmp_path, progress=None, objective=Spied(spy), **LAYOUT
    )
    assert bank_sizes == [0, 16, 16, 16]  # filled items not in the batch


def test_nan_loss_stops_and_keeps_last_checkpoint(tmp_path: Path) -> None:
    images, anc = _toy(16)  # 64 items, 4 steps per epoch
    config = TrainConfig(**(TINY | {"epochs": 3}))
    inner = LOSS
    calls = []

    def nan_at_epoch_2(z, anc_batch, bank):
        calls.append(1)
        loss, parts = inner(z, anc_batch, bank)
        return (loss * math.nan, parts) if len(calls) == 6 else (loss, parts)

    ckpt_path = tmp_path / "checkpoint.pt"
    with pytest.raises(TrainingDivergedError) as err:
        train(
            config,
            images,
            anc,
            np.arange(64),
            tmp_path,
            progress=None,
            objective=Spied(nan_at_epoch_2),
            **LAYOUT,
        )
    message = str(err.value)
    assert "epoch 2, step 2" in message and str(ckpt_path) in message and "nan" in message
    _, _, ckpt = load_checkpoint(ckpt_path)
    assert ckpt["epoch"] == 1 and len(ckpt["history"]) == 1


def test_inf_in_first_epoch_says_no_checkpoint(tmp_path: Path) -> None:
    def inf_loss(z, anc_batch, bank):
        return z.sum() * math.inf, {}

    with pytest.raises(TrainingDivergedError, match="epoch 1, step 1; no checkpoint"):
        _train(tmp_path, objective=Spied(inf_loss))
    assert not (tmp_path / "checkpoint.pt").exists()


def test_resume_errors(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    with pytest.raises(FileNotFoundError, match=str(path)):
        _train(tmp_path, resume="always")
    path.write_bytes(b"not a checkpoint")
    with pytest.raises(ValueError, match=f"{path}: cannot be read"):
        _train(tmp_path, resume="always")
    data = _toy(16)
    _train(tmp_path, data, config={"epochs": 2})
    with pytest.raises(ValueError, match=f"{path}: config field 'lr'"):
        _train(tmp_path, data, config={"lr": 0.02}, resume="always")
    with pytest.raises(ValueError, match="already trained 2 epochs > epochs=1"):
        _train(tmp_path, data, config={"epochs": 1}, resume="always")
    images, anc = data
    with pytest.raises(ValueError, match="train_idx_sha256 differs"):
        train(
            TrainConfig(**(TINY | {"epochs": 2})),
            images,
            anc,
            np.arange(60),
            tmp_path,
            progress=None,
            resume="always",
            **RUN,
        )
    other_layout = RUN | {"segment_sizes": [6, 10]}
    with pytest.raises(ValueError, match="segment_sizes differs"):
        train(
            TrainConfig(**(TINY | {"epochs": 2})),
            images,
            anc,
            np.arange(64),
            tmp_path,
            progress=None,
            resume="always",
            **other_layout,
        )


def test_encode_and_load_checkpoint(tmp_path: Path) -> None:
    images, _ = _toy(8)
    result = _train(tmp_path, config={"epochs": 1})
    codes = encode(result.model, images, batch_size=5)
    assert codes.dtype == np.int8 and codes.shape == (32, 16)
    assert set(np.unique(codes)) <= {-1, 1}
    assert np.array_equal(codes, encode(result.model, images, batch_size=512, device="cpu"))
    model, config, _ = load_checkpoint(result.checkpoint_path)
    assert config == TrainConfig(**(TINY | {"epochs": 1}))
    assert model.segment_sizes == tuple(SIZES) and not model.training
    assert np.array_equal(codes, encode(model, images))


def test_encode_sign_of_zero_is_minus_one() -> None:
    model = build_model(in_channels=1, n_bits=4, width=1 / 16, image_size=8)
    torch.nn.init.zeros_(model.head.weight)
    torch.nn.init.zeros_(model.head.bias)
    model.train()
    codes = encode(model, np.zeros((3, 8, 8), dtype=np.uint8))
    assert np.array_equal(codes, -np.ones((3, 4), dtype=np.int8))
    assert model.training  # mode restored


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("head_init", "zeros"),
        ("n_bits", 0),
        ("width", 0.0),
        ("image_size", 4),
        ("epochs", 0),
        ("batch_size", 1),
        ("lr", 0.0),
        ("momentum", 1.0),
        ("weight_decay", -1.0),
        ("lr_decay", 0.0),
        ("lr_decay_every", 0),
        ("grad_clip", -1.0),
        ("num_threads", 0),
    ],
)
def test_config_validation(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"TrainConfig.{field}"):
        TrainConfig(**{field: value})


@pytest.mark.parametrize(
    ("field", "value"),
    [("e1", "x"), ("e2", "entropy"), ("target", "zero"), ("reduction", "max"), ("alpha", -1.0)],
)
def test_shdh_settings_validation(field: str, value: object) -> None:
    with pytest.raises(ValueError, match=f"SHDHSettings.{field} must be"):
        SHDHSettings(**{field: value})


def test_a_checkpoint_resumes_only_under_its_loss_settings(tmp_path: Path) -> None:
    """The loop knows no method, but an objective names its settings and every checkpoint keeps
    them."""
    data = _toy(16)
    _train(tmp_path, data)
    other = shdh_objective(SIZES, LEVELS, U, SHDHSettings(alpha=0.5))
    with pytest.raises(ValueError, match="loss differs"):
        _train(tmp_path, data, config={"epochs": 3}, objective=other, resume="always")
    assert [
        h["epoch"] for h in _train(tmp_path, data, config={"epochs": 3}, resume="always").history
    ] == [1, 2, 3]


def test_train_bad_inputs(tmp_path: Path) -> None:
    images, anc = _toy(4)
    config = TrainConfig(**TINY)
    idx = np.arange(16)
    cases = [
        ((images.astype(np.float32), anc, idx), "uint8"),
        ((images, anc[:10], idx), "ancestors has 10 rows"),
        ((images, anc[:, :2], idx), "K=2 levels"),
        ((images, anc.astype(float), idx), "int array"),
        ((images, anc, idx + 1), r"train_idx values must be in \[0, 16\)"),
        ((images, anc, np.array([0, 0, 1])), "duplicates"),
        ((images, anc, np.array([0])), ">= 2 items"),
        ((images, anc, idx.astype(float)), "1-D int array"),
    ]
    for args, match in cases:
        with pytest.raises(ValueError, match=match):
            train(config, *args, tmp_path, progress=None, **RUN)
    with pytest.raises(ValueError, match="must sum to n_bits=16"):
        train(
            config,
            images,
            anc,
            idx,
            tmp_path,
            progress=None,
            **(RUN | {"segment_sizes": [8, 4]}),
        )


def test_resolve_device() -> None:
    assert resolve_device("cpu") == torch.device("cpu")
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    assert resolve_device("auto").type == expected
    with pytest.raises(ValueError, match="device"):
        resolve_device("tpu")
    if not torch.cuda.is_available():
        # Before any work, with the build's CUDA version and the driver (tests/unit/test_devices)
        with pytest.raises(ValueError, match=r"CUDA is not usable here \(torch .*NVIDIA driver"):
            resolve_device("cuda")


def test_a_fused_gpu_checkpoint_resumes_on_the_cpus_own_sgd(tmp_path: Path, monkeypatch) -> None:
    """train.fused_sgd is a runtime choice: a checkpoint written by a fused GPU fit resumes on
    the CPU with the CPU's kernels, to the model an uninterrupted CPU fit gives."""
    data = _toy(16)
    straight = _train(tmp_path / "a", data, config={"epochs": 3})
    _train(tmp_path / "b", data, config={"epochs": 2})
    path = tmp_path / "b" / "checkpoint.pt"
    ckpt = torch.load(path, weights_only=True)
    for group in ckpt["optimizer"]["param_groups"]:
        group["fused"], group["foreach"] = True, False  # as a fused CUDA fit saves it
    torch.save(ckpt, path)

    def no_fused_sgd(*args, **kwargs):
        raise AssertionError("the CPU fit ran fused SGD")

    sgd_module = sys.modules[torch.optim.SGD.__module__]  # torch.optim hides its module name
    monkeypatch.setattr(sgd_module, "_fused_sgd", no_fused_sgd)
    resumed = _train(tmp_path / "b", data, config={"epochs": 3, "fused_sgd": True}, resume="always")
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a)
