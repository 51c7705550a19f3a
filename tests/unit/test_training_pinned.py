"""Codes and losses of small CPU fits, pinned as digests under the CPU pin: the device-resident
batches, the on-device loss sums and the sync interval must leave CPU training bit-identical
(weights, codes and history), and the digests are the same on Intel and AMD CPUs
(tests/unit/test_cpu_vendors.py checks the emulated ones)."""

import hashlib
from pathlib import Path

import numpy as np
import pytest

from shdh.hashers.dpsh import DPSH
from shdh.hashers.shdh import shdh_objective
from shdh.hashers.supervision import PairSimilarity
from shdh.training.inference import encode
from shdh.training.loop import train
from shdh.training.loop_settings import LoopSettings, TrainConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")

LAYOUT = {
    "segment_sizes": [8, 8],
    "segment_levels": [2, 3],
    "layer_weights": [0.0, 2 / 3, 1 / 3],
    "objective": shdh_objective([8, 8], [2, 3], [0.0, 2 / 3, 1 / 3]),
}


def _data(n: int = 97) -> tuple[np.ndarray, np.ndarray]:
    """n 28x28 uint8 images (padded to 32 by the loop) of a K = 3 tree; n is odd so that the
    last batch has a lone item, which the loop skips."""
    rng = np.random.default_rng(7)
    leaf = rng.integers(0, 4, n)
    base = rng.normal(size=(4, 28, 28))[leaf] + 0.5 * rng.normal(size=(n, 28, 28))
    images = np.clip(128 + 40 * base, 0, 255).astype(np.uint8)
    return images, np.stack([np.zeros(n, int), 1 + leaf // 2, 3 + leaf], axis=1)


def _digest(codes: np.ndarray, history: list[dict]) -> str:
    losses = [round(h[k], 12) for h in history for k in ("loss", "e1", "e2", "flip_fraction")]
    return hashlib.sha256(codes.tobytes() + repr(losses).encode()).hexdigest()[:16]


@pytest.mark.parametrize(
    ("memory_bank", "expected"), [(False, "9f043d5067865835"), (True, "8fb43f866da70bb8")]
)
def test_shdh_cpu_fit_is_pinned(tmp_path: Path, memory_bank: bool, expected: str) -> None:
    images, anc = _data()
    config = TrainConfig(
        n_bits=16,
        width=1 / 16,
        batch_size=16,
        epochs=2,
        device="cpu",
        memory_bank=memory_bank,
        seed=3,
    )
    result = train(config, images, anc, np.arange(len(images)), tmp_path, progress=None, **LAYOUT)
    assert _digest(encode(result.model, images), result.history) == expected


def test_dpsh_cpu_fit_is_pinned() -> None:
    images, anc = _data()
    loop = LoopSettings(width=1 / 16, batch_size=16, epochs=2, device="cpu")
    hasher = DPSH(n_bits=12, loop=loop, seed=1)
    hasher.fit(images, PairSimilarity(anc, [0.0, 2 / 3, 1 / 3], "label"))
    assert _digest(hasher.encode(images), hasher.history_) == "2915fb4119b3ac41"
