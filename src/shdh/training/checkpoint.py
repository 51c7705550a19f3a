"""A deep fit's checkpoint file: what it holds, reading it back, rebuilding its model, and the
resume policy that decides whether a run continues it (its settings, data, loss and code must
agree: shdh.runtime.source_fingerprint), and writing it during training
(shdh.training.checkpoint_writer).
"""

import logging
import os
import time
from collections.abc import Sequence
from dataclasses import asdict, fields
from pathlib import Path
from typing import Any

import torch

from shdh.nets.hashing import HashingNet, build_model
from shdh.runtime.source_fingerprint import differing
from shdh.training.checkpoint_writer import CheckpointWriter
from shdh.training.loop_settings import RUNTIME_FIELDS, LoopSettings, TrainConfig
from shdh.training.state import State

log = logging.getLogger(__name__)

CHECKPOINT_NAME = "checkpoint.pt"

# Fields that may differ between a checkpoint and the config resuming it: they do not change
# what is computed (epochs may grow so that a finished run can be extended).
RESUMABLE_FIELDS = ("epochs", *RUNTIME_FIELDS)

# "never" trains afresh; "always" continues the checkpoint and fails, naming it, when it is
# missing or from other settings or data; "auto" continues a matching one, else starts afresh.
RESUME_MODES = ("never", "auto", "always")


def read_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path}: no such file")
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except Exception as err:  # torch raises several types for truncated or foreign files
        raise ValueError(
            f"checkpoint {path}: cannot be read ({type(err).__name__}: {err})"
        ) from err
    required = (
        "model",
        "objective",
        "optimizer",
        "scheduler",
        "epoch",
        "config",
        "history",
        "in_channels",
        "segment_sizes",
        "segment_levels",
        "layer_weights",
        "rng_cpu",
        "probe_codes",
    )
    missing = [k for k in required if not isinstance(ckpt, dict) or k not in ckpt]
    if missing:
        raise ValueError(f"checkpoint {path}: missing fields {missing}")
    return ckpt


def config_from(ckpt: dict[str, Any], path: Path) -> TrainConfig:
    known = {f.name for f in fields(TrainConfig)}
    unknown = sorted(set(ckpt["config"]) - known)
    if unknown:
        raise ValueError(f"checkpoint {path}: config has unknown fields {unknown}")
    try:
        return TrainConfig(**ckpt["config"])
    except (TypeError, ValueError) as err:
        raise ValueError(f"checkpoint {path}: invalid config ({err})") from err


def load_checkpoint(
    path: str | os.PathLike, *, map_location: str | torch.device = "cpu"
) -> tuple[HashingNet, TrainConfig, dict[str, Any]]:
    """Rebuild the model from the config stored in the checkpoint; returned in eval mode."""
    path = Path(path)
    ckpt = read_checkpoint(path, map_location)
    config = config_from(ckpt, path)
    model = build_model_for(
        config, ckpt["in_channels"], ckpt["segment_sizes"], head_norm=config.head_norm
    )
    model.load_state_dict(ckpt["model"])
    return model.to(map_location).eval(), config, ckpt


def build_model_for(
    config: LoopSettings,
    in_channels: int,
    segment_sizes: Sequence[int],
    *,
    head_norm: bool = False,
) -> HashingNet:
    """The network these settings describe, with random weights (the one place that reads them
    into build_model: training, checkpoints and saved hashers agree on it). head_norm: the
    objective's batch norm after the hashing head (shdh.training.objective.Objective)."""
    return build_model(
        in_channels=in_channels,
        n_bits=sum(int(s) for s in segment_sizes),
        width=config.width,
        image_size=config.image_size,
        head_init=config.head_init,
        segment_sizes=segment_sizes,
        backbone=config.backbone,
        centre_crop=config.augment,
        freeze_bn=config.freeze_bn,
        head_norm=head_norm,
    )


def check_resume(
    ckpt: dict[str, Any], path: Path, config: TrainConfig, expected: dict[str, Any]
) -> None:
    saved = config_from(ckpt, path)
    for f in fields(TrainConfig):
        if f.name in RESUMABLE_FIELDS:
            continue
        if getattr(saved, f.name) != getattr(config, f.name):
            raise ValueError(
                f"checkpoint {path}: config field {f.name!r} is {getattr(saved, f.name)!r} there "
                f"but {getattr(config, f.name)!r} now; resume only with the same config"
            )
    changed = differing(ckpt.get("code"), expected["code"])
    if changed:
        raise ValueError(
            f"checkpoint {path}: made by other code: {', '.join(changed)} changed since"
        )
    for key, value in expected.items():
        if ckpt.get(key) != value:
            raise ValueError(f"checkpoint {path}: {key} differs from this run's ({value!r})")
    if ckpt["epoch"] > config.epochs:
        raise ValueError(
            f"checkpoint {path}: already trained {ckpt['epoch']} epochs > epochs={config.epochs}"
        )


def check_resume_mode(resume: str, where: str = "train") -> str:
    if resume not in RESUME_MODES:
        raise ValueError(f"{where}: resume must be one of {RESUME_MODES}, got {resume!r}")
    return resume


def resumable_checkpoint(
    resume: str, path: Path, config: TrainConfig, identity: dict[str, Any]
) -> dict[str, Any] | None:
    check_resume_mode(resume)
    if resume == "never" or (resume == "auto" and not path.is_file()):
        return None
    try:
        ckpt = read_checkpoint(path)
        check_resume(ckpt, path, config, identity)
    except ValueError as err:
        if resume == "always":
            raise
        log.warning("not resuming: %s; training from scratch", err)
        return None
    log.info("resuming %s from epoch %d", path, ckpt["epoch"])
    return ckpt


class Checkpoints:
    """The run's checkpoint file: written after an epoch when config.checkpoint_seconds have
    passed since the last one, and after the last epoch (on a GPU by a background writer)."""

    def __init__(
        self, path: Path, config: TrainConfig, device: torch.device, identity: dict[str, Any]
    ) -> None:
        self.config, self.device, self.identity = config, device, identity
        self.writer = CheckpointWriter(path, background=device.type == "cuda")
        self.written = time.perf_counter()

    def after_epoch(self, state: State, last: bool) -> None:
        if last or time.perf_counter() - self.written >= self.config.checkpoint_seconds:
            self.writer.write(self._contents(state))
            self.written = time.perf_counter()

    def wait(self) -> None:
        self.writer.wait()

    def _contents(self, state: State) -> dict[str, Any]:
        checkpoint = {
            "model": state.model.state_dict(),
            "objective": state.objective.state_dict(),
            "optimizer": state.optimizer.state_dict(),
            "scheduler": state.scheduler.state_dict(),
            "epoch": state.epoch,
            "config": asdict(self.config),
            "history": state.history,
            "probe_codes": state.probe_codes,
            "rng_cpu": torch.get_rng_state(),
            "rng_cuda": torch.cuda.get_rng_state(self.device)
            if self.device.type == "cuda"
            else None,
            **self.identity,
        }
        if self.config.memory_bank:
            checkpoint["bank_z"], checkpoint["bank_filled"] = state.bank_z, state.bank_filled
        return checkpoint
