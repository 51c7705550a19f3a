"""One small fit, run by tests/unit/test_distributed.py under torchrun (several processes) or as
one process: ResNet-18 with frozen batch norm (a CPU has no synchronised batch norm, and
ResNet has no dropout), so that the processes' fit and the one-process fit of the global batch
can agree to float sums. Rank 0 saves the final weights and the history for the test to compare;
with several processes every rank then saves one batch-norm step (tests/unit/distributed_bn.py).

    python -m tests.unit.distributed_fit OUT_DIR BATCH_SIZE EPOCHS [RESUME]
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import torch

from shdh.core.level_weights import layer_weights
from shdh.hashers.shdh import shdh_objective
from shdh.training.distributed import World
from shdh.training.loop import train
from shdh.training.loop_settings import TrainConfig
from tests.unit.distributed_bn import save_step

N_ITEMS, SIZES, LEVELS = 32, [8, 8], [2, 3]


def data() -> tuple[np.ndarray, np.ndarray]:
    """32x32 RGB images of a K = 3 tree: two superclasses of two leaves, fixed patterns plus
    noise."""
    rng = np.random.default_rng(0)
    leaf = rng.integers(0, 4, N_ITEMS)
    base = rng.normal(size=(4, 32, 32, 3))
    images = np.clip(128 + 40 * (base[leaf] + 0.5 * rng.normal(size=(N_ITEMS, 32, 32, 3))), 0, 255)
    anc = np.stack([np.zeros(N_ITEMS, int), 1 + leaf // 2, 3 + leaf], axis=1)
    return images.astype(np.uint8), anc


def main(out_dir: str, batch_size: str, epochs: str, resume: str = "never") -> None:
    images, anc = data()
    config = TrainConfig(
        backbone="resnet18",
        freeze_bn=True,
        image_size=32,
        n_bits=16,
        batch_size=int(batch_size),
        epochs=int(epochs),
        lr=0.002,
        device="cpu",
        num_threads=1,
    )
    u = layer_weights(3)
    result = train(
        config,
        images,
        anc,
        np.arange(N_ITEMS),
        Path(out_dir) / "work",
        segment_sizes=SIZES,
        segment_levels=LEVELS,
        layer_weights=u,
        objective=shdh_objective(SIZES, LEVELS, u),
        resume=resume,
    )
    world = World.from_env()
    if world.distributed:
        save_step(Path(out_dir), world)
    if world.main:
        torch.save(result.model.state_dict(), Path(out_dir) / "weights.pt")
        (Path(out_dir) / "history.json").write_text(json.dumps(result.history))


if __name__ == "__main__":
    main(*sys.argv[1:])
