"""How the training images reach the device, torch.compile as an option, and the GPU paths."""

import logging
from pathlib import Path

import numpy as np
import pytest
import torch

from shdh.training import batches, step
from shdh.training.batches import data_path
from shdh.training.checkpoint import load_checkpoint
from shdh.training.inference import encode
from shdh.training.loop import train
from shdh.training.loop_settings import TrainConfig

from .test_training_pinned import LAYOUT, _data

pytestmark = pytest.mark.usefixtures("one_torch_thread")
TINY = {"n_bits": 16, "width": 1 / 16, "batch_size": 16, "epochs": 1, "seed": 3}
needs_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def test_data_path_follows_the_device_and_the_free_memory() -> None:
    cuda = torch.device("cuda")
    assert data_path(10**12, torch.device("cpu")) == "host"
    assert data_path(49 * 2**20, cuda, free_bytes=80 * 2**30) == "resident"
    assert data_path(int(0.5 * 2**30), cuda, free_bytes=2**30) == "resident"
    assert data_path(int(0.5 * 2**30) + 1, cuda, free_bytes=2**30) == "pinned"


def test_the_log_names_the_path_taken(tmp_path: Path, caplog) -> None:
    images, anc = _data()
    with caplog.at_level(logging.INFO, logger="shdh.training.batches"):
        train(
            TrainConfig(**TINY, device="cpu"),
            images,
            anc,
            np.arange(len(images)),
            tmp_path,
            progress=None,
            **LAYOUT,
        )
    assert any(
        "training images:" in r.message and "host memory" in r.message for r in caplog.records
    )


def test_compile_wraps_the_training_steps_only(tmp_path: Path, monkeypatch) -> None:
    """train.compile hands the network to torch.compile for the steps; checkpoints and codes
    come from the network itself (no `_orig_mod.` keys). Compiling for real on a CPU takes
    minutes, so a pass-through stands in for the compiler here; the GPU test compiles."""
    compiled = []

    def fake_compile(model):
        compiled.append(model)
        return model

    monkeypatch.setattr(step.torch, "compile", fake_compile)
    images, anc = _data()
    config = TrainConfig(**TINY, device="cpu", compile=True)
    result = train(config, images, anc, np.arange(len(images)), tmp_path, progress=None, **LAYOUT)
    assert compiled == [result.model]
    model, saved, _ = load_checkpoint(result.checkpoint_path)
    assert saved.compile and not any(k.startswith("_orig_mod") for k in model.state_dict())
    # Resuming may switch compilation off: it does not change what is computed.
    again = train(
        TrainConfig(**(TINY | {"epochs": 2}), device="cpu"),
        images,
        anc,
        np.arange(len(images)),
        tmp_path,
        progress=None,
        resume="always",
        **LAYOUT,
    )
    assert [h["epoch"] for h in again.history] == [1, 2]


@pytest.mark.gpu
@needs_cuda
@pytest.mark.parametrize("path", ["resident", "pinned"])
def test_gpu_paths_train_and_log(tmp_path: Path, monkeypatch, caplog, path: str) -> None:
    monkeypatch.setattr(batches, "data_path", lambda *args, **kwargs: path)
    images, anc = _data(300)
    with caplog.at_level(logging.INFO, logger="shdh.training.batches"):
        result = train(
            TrainConfig(**(TINY | {"epochs": 2}), device="cuda"),
            images,
            anc,
            np.arange(len(images)),
            tmp_path,
            progress=None,
            **LAYOUT,
        )
    message = "resident on" if path == "resident" else "pinned host buffers"
    assert any(message in r.message for r in caplog.records)
    assert all(np.isfinite(h["loss"]) for h in result.history)
    assert result.history[-1]["loss"] < result.history[0]["loss"]
    assert set(np.unique(encode(result.model, images))) <= {-1, 1}


@pytest.mark.gpu
@needs_cuda
def test_gpu_compile_trains(tmp_path: Path) -> None:
    images, anc = _data(300)
    config = TrainConfig(**(TINY | {"epochs": 2}), device="cuda", compile=True)
    result = train(config, images, anc, np.arange(len(images)), tmp_path, progress=None, **LAYOUT)
    assert all(np.isfinite(h["loss"]) for h in result.history)
