"""The deep methods' shared settings: the network (backbone, starting weights, views) and the
training loop.

One dataclass, `LoopSettings`, is these settings everywhere: params.yaml's `train` section
holds them (shdh.settings checks each value), every deep hasher takes one as its `loop`
argument, and the training loop's `TrainConfig` is one plus the fit's own code length, seed
and memory bank. A method's own settings are another such object, its `settings`
(shdh.hashers.method_settings); `settings_of` turns either back from the mapping a saved
params.json holds.
Torch-free, so that checking a params file does not load PyTorch.
"""

from __future__ import annotations

import numbers
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, TypeVar

import numpy as np

from shdh.nets import BACKBONES, HEAD_INITS

# "step": the paper's fixed decay (lr *= lr_decay every lr_decay_every epochs) for `epochs`
# epochs. "plateau": the convergence rule (docs/results-gpu.md): lr *= lr_decay once the
# validation NDCG@100 has gained less than min_delta for more than `patience` epochs, and the fit
# stops at the plateau after max_decays decays; `epochs` is then only a cap.
SCHEDULES = ("step", "plateau")
T = TypeVar("T")


@dataclass(frozen=True)
class NetworkSettings:
    """The network a deep fit trains: its backbone, the weights it starts from and how it sees
    the images. Checked on construction, as the loop's settings are (`LoopSettings` adds
    its own checks through the same three hooks)."""

    backbone: str = "cnnf"  # the network under the hashing head (shdh.nets.backbones)
    # "none", a weights file, an s3:// or https:// location, or a torchvision weights name
    # (shdh.nets.pretrained); loaded into the backbone when a fit starts
    pretrained: str = "none"
    pretrained_sha256: str | None = None  # the weights file's SHA-256; needed for https://
    backbone_lr: float = 1.0  # the backbone's learning rate as a multiple of lr (the head's)
    freeze_bn: bool = False  # the backbone's batch-norm statistics stay as loaded
    augment: bool = False  # random resized crops and flips in training; centre crop to encode
    width: float = 1.0  # CNN-F width multiplier; 1.0 = conv 64/256, fc 4096
    image_size: int = 32  # network input side; 28x28 inputs are padded to it

    def __post_init__(self) -> None:
        name = type(self).__name__
        for problem in wrong_kinds(self):
            raise ValueError(f"{name}.{problem}")
        for key, choices in self._choices().items():
            if getattr(self, key) not in choices:
                raise ValueError(
                    f"{name}.{key} must be one of {choices}, got {getattr(self, key)!r}"
                )
        for key, ok in self._in_range().items():
            if not ok:
                raise ValueError(f"{name}.{key} is out of range: {getattr(self, key)!r}")
        for problem in self._conflicts():
            raise ValueError(f"{name}.{problem}")

    def _choices(self) -> dict[str, tuple[str, ...]]:
        return {"backbone": BACKBONES}

    def _in_range(self) -> dict[str, bool]:
        sha = self.pretrained_sha256
        return {
            "pretrained": bool(self.pretrained),
            "pretrained_sha256": sha is None or bool(re.fullmatch("[0-9a-fA-F]{64}", sha)),
            "backbone_lr": self.backbone_lr >= 0,
            "width": self.width > 0,
            "image_size": self.image_size >= 8,
        }

    def _conflicts(self) -> list[str]:
        """Values each fine alone that do not go together, as '<key> ...: why'."""
        if self.pretrained.startswith(("https://", "http://")) and self.pretrained_sha256 is None:
            return [
                f"pretrained {self.pretrained!r}: weights from the web need pretrained_sha256, "
                "checked before they are used"
            ]
        return []


@dataclass(frozen=True)
class LoopSettings(NetworkSettings):
    """The network's settings and the loop's: params.yaml's `train` section, a hasher's `loop`."""

    epochs: int = 10
    batch_size: int = 128  # paper: minibatch 128
    lr: float = 0.01  # paper: 0.01
    momentum: float = 0.9
    weight_decay: float = 5e-4
    lr_decay: float = 2 / 3  # paper: lr *= 2/3 ...
    lr_decay_every: int = 20  # ... every 20 "iterations", read as epochs
    grad_clip: float = 10.0  # max gradient norm; 0 = off (the "sum" scale blows up without it)
    head_init: str = "default"  # "default" (fan-in) | "paper" (U[0, 0.001]: the h~=0 saddle)
    device: str = "auto"  # "auto" = cuda when available, else cpu
    bf16: bool = True  # bf16 autocast for the network on CUDA (never on CPU)
    num_threads: int | None = None  # torch CPU threads for this run; None = leave as is
    loader_workers: int = 0  # processes that gather training batches ahead; 0 = in the loop
    compile: bool = False  # torch.compile the network for the training steps (GPU; opt-in)
    cuda_graph: bool = False  # replay each training step as one CUDA graph (GPU; opt-in)
    # SGD as one fused kernel over every parameter (GPU; opt-in): the per-tensor-list kernels of
    # the default read and write the weights, gradients and momenta several times.
    fused_sgd: bool = False
    # Seconds between checkpoints (0: after every epoch; the last epoch always gets one). A GPU
    # epoch of the paper's network takes about a second and its checkpoint 270 MB, so writing
    # every epoch would cost a fifth of the time; an interrupted fit redoes at most this much.
    checkpoint_seconds: float = 0.0
    val_size: int = 0  # training items held out and scored (NDCG@100) after every epoch; 0 = none
    schedule: str = "step"  # see SCHEDULES
    patience: int = 2  # "plateau": epochs without a gain of min_delta before the lr decays
    min_delta: float = 0.001  # "plateau": the validation NDCG@100 gain that counts
    max_decays: int = 2  # "plateau": the plateau after this many decays ends the fit

    def _choices(self) -> dict[str, tuple[str, ...]]:
        return {**super()._choices(), "head_init": HEAD_INITS, "schedule": SCHEDULES}

    def _in_range(self) -> dict[str, bool]:
        return {
            **super()._in_range(),
            "epochs": self.epochs >= 1,
            "batch_size": self.batch_size >= 2,
            "lr": self.lr > 0,
            "momentum": 0 <= self.momentum < 1,
            "weight_decay": self.weight_decay >= 0,
            "lr_decay": 0 < self.lr_decay <= 1,
            "lr_decay_every": self.lr_decay_every >= 1,
            "grad_clip": self.grad_clip >= 0,
            "num_threads": self.num_threads is None or self.num_threads >= 1,
            "loader_workers": self.loader_workers >= 0,
            "val_size": self.val_size >= 0,
            "patience": self.patience >= 0,
            "min_delta": self.min_delta >= 0,
            "max_decays": self.max_decays >= 0,
            "checkpoint_seconds": self.checkpoint_seconds >= 0,
        }

    def _conflicts(self) -> list[str]:
        if self.schedule == "plateau" and self.val_size == 0:
            return ["schedule 'plateau' follows the validation score: it needs val_size > 0"]
        return super()._conflicts()

    @classmethod
    def of(cls, value: LoopSettings | dict[str, Any] | None) -> LoopSettings:
        """A LoopSettings from itself, a mapping (a saved hasher's params.json) or None."""
        return settings_of(cls, value, "loop")


# What a field's annotation asks of its value. numbers' abstract types take numpy's scalars too;
# a bool is an int to Python, but never a count or a rate here.
_KINDS: dict[str, tuple[tuple[type, ...], str]] = {
    "int": ((numbers.Integral,), "an integer"),
    "float": ((numbers.Real,), "a number"),
    "bool": ((bool, np.bool_), "true or false"),
    "str": ((str,), "a string"),
}


def wrong_kinds(settings: Any) -> list[str]:
    """A problem ("FIELD must be KIND, got VALUE") for each field whose value is not of its
    annotated kind (int, float, bool or str, or one of them | None): the range checks that
    follow would otherwise fail on a comparison that names no field (a value from a command
    line or a hand-written mapping, which params.yaml's own checks never saw)."""
    problems = []
    for f in fields(settings):
        kinds = [k.strip() for k in str(f.type).split("|")]
        value = getattr(settings, f.name)
        plain = [k for k in kinds if k in _KINDS]
        if not plain or len(plain) + ("None" in kinds) != len(kinds):
            continue  # another annotation: not checked here
        if value is None and "None" in kinds:
            continue
        types = tuple(t for k in plain for t in _KINDS[k][0])
        is_bool = isinstance(value, bool | np.bool_)
        if not isinstance(value, types) or (is_bool and "bool" not in plain):
            kind = " or ".join(_KINDS[k][1] for k in plain)
            problems.append(f"{f.name} must be {kind}, got {value!r}")
    return problems


def settings_of(cls: type[T], value: T | Mapping[str, Any] | None, argument: str) -> T:
    """A frozen settings dataclass that a hasher takes as one argument (its `loop`, its
    `objective`) from an instance, a mapping of its fields (what a saved params.json holds:
    Hasher.save writes a dataclass as its fields) or None (the defaults). A mapping is checked
    key by key, so a misspelt field is refused by name rather than dropped."""
    if value is None:
        return cls()
    if isinstance(value, cls):
        return value
    if not isinstance(value, Mapping):
        raise TypeError(f"{argument}: expected {cls.__name__} or a mapping, got {value!r}")
    known = [f.name for f in fields(cls)]
    unknown = sorted(set(value) - set(known))
    if unknown:
        raise ValueError(f"{argument}: unknown settings {unknown} (known: {known})")
    return cls(**value)


LOOP_FIELDS = tuple(f.name for f in fields(LoopSettings))
# The loop settings that change how fast a fit runs, never what it computes: a checkpoint resumes
# under other values of them, and records that compare fits leave them out.
RUNTIME_FIELDS = (
    "device",
    "num_threads",
    "loader_workers",
    "compile",
    "cuda_graph",
    "fused_sgd",
    "checkpoint_seconds",
)
DEFAULT_LOOP = LoopSettings()  # the hashers' default (frozen, so one instance serves all)


@dataclass(frozen=True)
class TrainConfig(LoopSettings):
    """What one run of the training loop is: the shared settings, plus the fit's own output
    width, seed, memory bank (pairing each batch with detached past outputs, as DPSH does) and
    whether its objective puts batch norm after the hashing head (OrthoHash)."""

    n_bits: int = 64  # network outputs L (the code length, or the oracle's class count)
    seed: int = 0
    memory_bank: bool = False
    head_norm: bool = False

    def _in_range(self) -> dict[str, bool]:
        return {"n_bits": self.n_bits >= 1, **super()._in_range()}
