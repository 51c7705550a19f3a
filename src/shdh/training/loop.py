"""The epoch loop shared by the deep hashing methods: train() and the run it makes of its parts.

The method arrives as its objective (shdh.training.objective.Objective: SHDH's J, paper Eq. 7,
DPSH's likelihood, the classifier oracle's cross-entropy, ...), called on every batch, so that
every deep method shares one loop that knows none of them; every checkpoint records the
objective's settings and holds its state. Optimisation follows the paper's
Algorithm 1: minibatch 128, SGD lr 0.01, lr *= 2/3 every 20 "iterations" (read as epochs).
Gradient-norm clipping is on by default because docs/method.md records that the
sum-over-partners loss scale, which leaves the h~ = 0 saddle, blows up without it.

Determinism: each epoch's order comes from a generator seeded with (seed, epoch), and the model
init, dropout and CUDA RNG states are seeded inside a forked RNG scope and saved in every
checkpoint, so a resumed CPU run ends with bit-identical weights to an uninterrupted one.

The parts, one job a module: the run's state (shdh.training.state), its checkpoint file and the
resume policy (shdh.training.checkpoint), where the images live and how a batch reaches the device
(shdh.training.batches), the step (shdh.training.step), the loss log (shdh.training.loss_log), the
probe codes (shdh.training.probe_codes), validation and the schedule (shdh.training.convergence),
and the network applied to images (shdh.training.inference).
"""

import contextlib
import hashlib
import logging
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from shdh.nets.hashing import HashingNet
from shdh.nets.pretrained import Weights
from shdh.runtime.devices import resolve_device
from shdh.runtime.progress import open_bar
from shdh.runtime.source_fingerprint import fingerprint
from shdh.training import convergence, distributed
from shdh.training.batches import Batches
from shdh.training.checkpoint import (
    CHECKPOINT_NAME,
    Checkpoints,
    build_model_for,
    resumable_checkpoint,
)
from shdh.training.convergence import Schedule, Validate
from shdh.training.distributed import ONE_PROCESS, World
from shdh.training.inference import torch_threads
from shdh.training.loop_settings import LoopSettings, TrainConfig
from shdh.training.loss_log import SYNC_EVERY, LossLog
from shdh.training.objective import Objective
from shdh.training.probe_codes import Probe
from shdh.training.state import State, make_optimizer
from shdh.training.step import TrainStep, seeded_generator

log = logging.getLogger(__name__)


class TrainingDivergedError(RuntimeError):
    """The loss became NaN or inf; the last good checkpoint was left as it was."""


@dataclass
class TrainResult:
    model: HashingNet
    history: list[dict[str, float]]
    checkpoint_path: Path
    pretrained_sha256: str | None = None  # the SHA-256 of the weights the backbone started from


def _sha256(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a, dtype=np.int64).tobytes()).hexdigest()


def _check_inputs(
    config: TrainConfig,
    images: np.ndarray,
    ancestors: np.ndarray,
    train_idx: np.ndarray,
    segment_sizes: Sequence[int],
    segment_levels: Sequence[int],
    layer_weights: Sequence[float],
) -> None:
    if images.dtype != np.uint8 or images.ndim not in (3, 4):
        raise ValueError(
            f"train: images must be uint8 (N,H,W) or (N,H,W,C), got {images.dtype} {images.shape}"
        )
    if ancestors.ndim not in (2, 3) or not np.issubdtype(ancestors.dtype, np.integer):
        raise ValueError(
            "train: ancestors must be an (N, K) int array or (N, K, M) int ancestor sets, got "
            f"{ancestors.dtype} {ancestors.shape}"
        )
    if ancestors.ndim == 3 and ancestors.shape[2] < 1:
        raise ValueError(f"train: ancestor sets {ancestors.shape} need M >= 1")
    if len(ancestors) != len(images):
        raise ValueError(f"train: ancestors has {len(ancestors)} rows, images {len(images)}")
    if ancestors.shape[1] != len(layer_weights):
        raise ValueError(
            f"train: ancestors has K={ancestors.shape[1]} levels, layer_weights "
            f"{len(layer_weights)}"
        )
    if train_idx.ndim != 1 or not np.issubdtype(train_idx.dtype, np.integer):
        raise ValueError(f"train: train_idx must be a 1-D int array, got {train_idx.dtype}")
    if len(train_idx) < 2:
        raise ValueError(f"train: train_idx needs >= 2 items, got {len(train_idx)}")
    if train_idx.min() < 0 or train_idx.max() >= len(images):
        raise ValueError(f"train: train_idx values must be in [0, {len(images)})")
    if len(np.unique(train_idx)) != len(train_idx):
        raise ValueError("train: train_idx has duplicates")
    if sum(segment_sizes) != config.n_bits or len(segment_levels) != len(segment_sizes):
        raise ValueError(
            f"train: segment_sizes {list(segment_sizes)} must sum to n_bits={config.n_bits} and "
            f"match segment_levels {list(segment_levels)}"
        )


def _identity(
    images: np.ndarray,
    train_idx: np.ndarray,
    layout: dict[str, list],
    objective: Objective,
    code: dict[str, str] | None,
    weights: Weights | None,
) -> dict[str, Any]:
    """What a checkpoint must agree on, besides the config, to be resumed: the input channels,
    the code layout, the pretrained weights it started from, the training items, the
    objective's settings and the code that trains."""
    return {
        "in_channels": 1 if images.ndim == 3 else int(images.shape[3]),
        **layout,
        "pretrained_sha256": weights.sha256 if weights else None,
        "train_idx_sha256": _sha256(train_idx),
        "loss": objective.record,
        "code": code or fingerprint([__name__, type(objective).__module__]),
        **distributed.world_record(),
    }


def train(
    config: TrainConfig,
    images: np.ndarray,
    ancestors: np.ndarray,
    train_idx: np.ndarray,
    out_dir: str | os.PathLike,
    *,
    segment_sizes: Sequence[int],
    segment_levels: Sequence[int],
    layer_weights: Sequence[float],
    objective: Objective,
    resume: str = "never",
    progress: Callable[[int, str], Any] | None = None,
    on_epoch: Callable[[dict[str, float]], None] | None = None,
    code: dict[str, str] | None = None,
    validate: Validate | None = None,
) -> TrainResult:
    """Train a HashingNet on images[train_idx]; checkpoint to out_dir/checkpoint.pt after every
    epoch, or every config.checkpoint_seconds and after the last one.

    ancestors: (N, K) ancestor ids, or (N, K, M) ancestor sets (multi-label items, -1 padded),
    handed to the objective batch by batch.

    objective: the method's (shdh.training.objective.Objective); its settings must match for a
    checkpoint to be resumed, and its state is trained and kept. on_epoch(entry) is called after
    each epoch, once its checkpoint (when one is due) is handed to the writer (e.g. to log to
    MLflow; on a GPU the file may still be being written, shdh.training.checkpoint_writer). resume:
    one of RESUME_MODES; "auto" is what `dvc repro` uses, so an interrupted pipeline picks up where
    it stopped but a changed one retrains. progress(total, description) makes each epoch's bar
    (shdh.runtime.progress.bars); None: no bar. code: the digests of the code that decides the
    numbers (shdh.runtime.source_fingerprint; default: this loop's and the objective's modules,
    with what they import); a checkpoint made by other code is not resumed. validate: how the
    method scores held-out items (needed when config.val_size > 0; shdh.training.convergence says
    what is held out and how the score schedules and stops the fit).
    """
    ancestors = np.asarray(ancestors)
    train_idx = np.asarray(train_idx)
    layout = {
        "segment_sizes": [int(s) for s in segment_sizes],
        "segment_levels": [int(k) for k in segment_levels],
        "layer_weights": [float(w) for w in layer_weights],
    }
    _check_inputs(config, images, ancestors, train_idx, *layout.values())
    if config.val_size > 0 and validate is None:
        raise ValueError("train: val_size > 0 needs a validate function to score held-out items")
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ckpt_path = out_dir / CHECKPOINT_NAME
    device, world = _placed(config)
    weights = Weights.of(config)
    identity = _identity(images, train_idx, layout, objective, code, weights)
    ckpt = resumable_checkpoint(resume, ckpt_path, config, identity)
    run = _Run(
        config, device, identity, objective, ckpt_path, progress, on_epoch, validate, weights, world
    )
    cuda_devices = [device] if device.type == "cuda" else []
    # Seeds stay local to this run.
    with torch_threads(config.num_threads), torch.random.fork_rng(devices=cuda_devices):
        torch.manual_seed(config.seed)
        return run(images, ancestors, train_idx, ckpt)


def check_weights(settings: LoopSettings, images: Any) -> None:
    """Load the pretrained weights into a backbone for these images, then drop it: weights that
    are missing, altered or of another network fail before a caller opens the fit's MLflow run
    or touches its work folder, whose checkpoint a fit starting afresh replaces.

    A pipeline's fit is checked twice (by the step, before its MLflow run, and by the hasher),
    and a ResNet's build and load take a second or more: a file whose SHA-256 has loaded into
    the same backbone in this process is not loaded again."""
    weights = Weights.of(settings)
    if weights is None:
        return
    in_channels = 1 if images.ndim == 3 else int(images.shape[3])
    backbone = (settings.backbone, settings.width, settings.image_size)
    key = (weights, in_channels, backbone)
    if key not in _LOADED_WEIGHTS:
        weights.load(build_model_for(settings, in_channels, [1]).backbone)
        _LOADED_WEIGHTS.add(key)


_LOADED_WEIGHTS: set[tuple[Any, ...]] = set()  # what check_weights has loaded in this process


def _placed(config: TrainConfig) -> tuple[torch.device, World]:
    """The training device, and this process's place among the fit's: one, or torchrun's
    (then joined to the others, on its local GPU where there are GPUs)."""
    device = resolve_device(config.device)
    world = World.from_env()
    if world.distributed:
        distributed.check_settings(config)
        device = distributed.join(world, device)
    return device, world


def _restore(
    config: TrainConfig,
    device: torch.device,
    identity: dict[str, Any],
    objective: Objective,
    ckpt: dict[str, Any] | None,
    n_train: int,
    probe: "Probe",
    weights: Weights | None,
    world: World,
) -> State:
    """A fresh model, optimiser and schedule, or the checkpoint's, RNG state included; the
    objective on the device, with the checkpoint's state."""
    model = build_model_for(
        config, identity["in_channels"], identity["segment_sizes"], head_norm=config.head_norm
    )
    if ckpt is None and weights is not None:  # a checkpoint holds the weights it went on to
        weights.load(model.backbone)
    if world.distributed:
        model = distributed.synced_batch_norm(model, device)
    model = model.to(device)
    if device.type == "cuda":  # NHWC convolutions run faster on tensor cores; not on CPU
        model = model.to(memory_format=torch.channels_last)
    objective = objective.to(device)
    optimizer = make_optimizer(config, model, device, objective)
    scheduler = convergence.make_scheduler(config, optimizer)
    n_bank = n_train if config.memory_bank else 0
    state = State(
        model,
        objective,
        optimizer,
        scheduler,
        [],
        torch.zeros(0),
        torch.zeros(n_bank, config.n_bits, device=device),
        torch.zeros(n_bank, dtype=torch.bool, device=device),
    )
    if ckpt is None:
        state.probe_codes = probe.codes(model)
    else:
        state.load(ckpt, config.memory_bank, device)
    return state


@dataclass
class _Epochs:
    """The passes over the training items, each in the seeded (seed, epoch) order, guarded
    against a non-finite loss."""

    config: TrainConfig
    step: TrainStep
    batches: Batches
    progress: Callable[[int, str], Any] | None  # progress(total, description) -> a bar
    ckpt_path: Path  # named when a non-finite loss stops the fit
    world: World = ONE_PROCESS

    def run(self, epoch: int, state: State) -> dict[str, float]:
        """One epoch's history entry: the mean losses, the lr and the throughput."""
        config, device = self.config, self.batches.device
        n_train = len(self.batches.train_idx)
        world = self.world
        state.model.train()
        self.step.start_epoch(epoch)  # the views' crops and the objective's schedule
        if world.distributed:
            distributed.seed_epoch(config.seed, epoch, world)
        lr = state.optimizer.param_groups[0]["lr"]
        order = torch.randperm(n_train, generator=seeded_generator(config.seed, epoch))
        order_on_device = order.to(device)  # one copy per epoch, none per step
        # gather, or the loader's batches of this rank's positions
        fetch = self.batches.for_epoch(world.own_order(order, config.batch_size))
        losses = LossLog(math.ceil(n_train / (config.batch_size * world.size)), device)
        n_seen, t0 = 0, time.perf_counter()
        desc = f"epoch {epoch}/{config.epochs}"
        bar = open_bar(self.progress, losses.n_steps, desc)
        for step, mine, whole in world.steps(n_train, config.batch_size):
            pos, pos_t = order[mine], order_on_device[mine]
            full = len(pos) == config.batch_size
            batch = fetch(pos, pos_t)
            loss, parts = self.step(batch, pos_t, full=full, batch_pos=order_on_device[whole])
            losses.add(step, loss, parts)
            n_seen += whole.stop - whole.start if world.distributed else len(pos)
            if len(losses.steps) % SYNC_EVERY == 0:
                self._guard(losses, epoch, bar)
            bar.update(1)
        self._guard(losses, epoch, bar)
        bar.close()
        state.objective.end_epoch()
        seconds = time.perf_counter() - t0  # the guard above waited for the GPU to finish
        return {
            "epoch": epoch,
            **losses.means(),
            "lr": lr,
            "seconds": seconds,
            "images_per_sec": n_seen / seconds if seconds > 0 else math.inf,
        }

    def _guard(self, losses: LossLog, epoch: int, bar: Any) -> None:
        """Stop at a non-finite loss before it reaches a checkpoint: the last good one stays."""
        bad = losses.first_non_finite()
        if bad is None:
            if losses.steps:
                bar.set_postfix(loss=f"{losses.last:.4f}", refresh=False)
            return
        bar.close()
        step, value = bad
        last = (
            f"last good checkpoint: {self.ckpt_path} (epoch {epoch - 1}), left untouched"
            if epoch > 1
            else "no checkpoint was written yet"
        )
        raise TrainingDivergedError(f"loss is {value} at epoch {epoch}, step {step}; {last}")


@dataclass
class _Run:
    """One training run: restore (or start), then per epoch train, follow the probe codes,
    validate and step the schedule, checkpoint and report the epoch."""

    config: TrainConfig
    device: torch.device
    identity: dict[str, Any]
    objective: Objective
    ckpt_path: Path
    progress: Callable[[int, str], Any] | None  # progress(total, description) -> a bar
    on_epoch: Callable[[dict[str, float]], None] | None
    validate: Validate | None = None
    weights: Weights | None = None  # pretrained weights for the backbone, loaded on a fresh start
    world: World = ONE_PROCESS  # this process among the fit's (shdh.training.distributed)

    def __call__(
        self,
        images: np.ndarray,
        ancestors: np.ndarray,
        train_idx: np.ndarray,
        ckpt: dict[str, Any] | None,
    ) -> TrainResult:
        config, device = self.config, self.device
        split = convergence.validation_split(len(train_idx), config.val_size, config.seed)
        schedule = Schedule(
            config, self.validate, train_idx[split.queries], train_idx[split.database]
        )
        train_idx = train_idx[split.train]
        # (n, K) ancestor ids, or (n, K, M) ancestor sets of multi-label items
        anc_train = torch.as_tensor(ancestors[train_idx], dtype=torch.long, device=device)
        probe = Probe.choose(images, train_idx, config.seed, device)
        world = self.world
        state = _restore(
            config,
            device,
            self.identity,
            self.objective,
            ckpt,
            len(train_idx),
            probe,
            self.weights,
            world,
        )
        batches = Batches(images, train_idx, device, config.batch_size, config.loader_workers)
        step = TrainStep(config, device, state, anc_train, world)
        epochs = _Epochs(config, step, batches, self.progress, self.ckpt_path, world)
        checkpoints = Checkpoints(self.ckpt_path, config, device, self.identity)
        stopped = bool(state.history) and bool(state.history[-1].get(convergence.STOP_KEY))
        with _cuda_speedups(device):
            for epoch in range(state.epoch + 1, config.epochs + 1):
                if stopped:
                    break
                entry = epochs.run(epoch, state)
                entry.update(probe.diagnostics(state))
                stopped = schedule.after_epoch(entry, state)
                state.history.append(entry)
                state.epoch = epoch
                if world.main:  # one writer and one log for the fit
                    checkpoints.after_epoch(state, last=stopped or epoch == config.epochs)
                    if self.on_epoch is not None:
                        self.on_epoch(state.history[-1])
                distributed.barrier(world)
        checkpoints.wait()
        _warn_if_cut_short(config, state.history)
        state.model.eval()
        return TrainResult(
            model=state.model,
            history=state.history,
            checkpoint_path=self.ckpt_path,
            pretrained_sha256=self.weights.sha256 if self.weights else None,
        )


def _warn_if_cut_short(config: TrainConfig, history: list[dict]) -> None:
    """A plateau fit that the epoch cap ended while its score still gained has not converged by
    the rule; its numbers are not the converged method's, and the log must say so."""
    how = convergence.ended_by(history, config.patience, config.min_delta)
    if how != convergence.AT_THE_CAP_GAINING:
        return
    log.warning(
        "the fit ended at the epoch cap (train.epochs = %d) while its validation score was still "
        "gaining at least min_delta = %g within %d epochs: it has not converged by the rule; "
        "raise train.epochs, and a run resumed from its checkpoint trains it further",
        config.epochs,
        config.min_delta,
        config.patience + 1,
    )


@contextlib.contextmanager
def _cuda_speedups(device: torch.device) -> Iterator[None]:
    """cuDNN picks its fastest convolution algorithms for the (fixed) batch shape on a GPU;
    the flag is process-wide, so it is put back afterwards. CPU runs are left as they are."""
    if device.type != "cuda":
        yield
        return
    old = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = old
