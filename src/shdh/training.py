"""The epoch loop shared by the deep hashing methods: checkpoints, resume, progress, device.

The loss is a pluggable callable `loss_fn(z, anc_batch, bank) -> (loss, parts)` (bank is None or
(bank_z, bank_anc)), so that SHDH (paper Eq. 7, `shdh.losses.shdh_loss`) and DPSH share one loop.
Optimisation follows the paper's Algorithm 1: minibatch 128, SGD lr 0.01, lr *= 2/3 every 20
"iterations" (read as epochs). Gradient-norm clipping is on by default because METHOD.md measured
that the sum-over-partners loss scale, which leaves the h~ = 0 saddle, blows up without it.

Determinism: each epoch's order comes from a generator seeded with (seed, epoch), and the model
init, dropout and CUDA RNG states are seeded inside a forked RNG scope and saved in every
checkpoint, so a resumed CPU run ends with bit-identical weights to an uninterrupted one.
"""

import contextlib
import hashlib
import logging
import math
import os
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, fields
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn
from tqdm.auto import tqdm

from shdh.atomic import atomic_path
from shdh.losses import E1_MODES, E2_MODES, REDUCTIONS, TARGETS, shdh_loss
from shdh.nets.cnnf import to_input
from shdh.nets.hashing import HEAD_INITS, HashingNet, build_model

log = logging.getLogger(__name__)

CHECKPOINT_NAME = "checkpoint.pt"
PROBE_SIZE = 1000  # training items whose codes are tracked across epochs
# Fields that may differ between a checkpoint and the config resuming it: they do not change
# what is computed (epochs may grow so that a finished run can be extended).
_RESUMABLE_FIELDS = ("epochs", "device", "num_threads")

LossFn = Callable[
    [torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None],
    tuple[torch.Tensor, dict[str, torch.Tensor]],
]


class TrainingDivergedError(RuntimeError):
    """The loss became NaN or inf; the last good checkpoint was left as it was."""


@dataclass
class TrainConfig:
    n_bits: int = 64  # code length L
    layout: str = "levels"  # segments: "levels" (K-1, levels 2..K) or "paper" (K, root wasted)
    width: float = 1.0  # CNN-F width multiplier; 1.0 = conv 64/256, fc 4096
    image_size: int = 32  # network input side; 28x28 inputs are padded to it
    epochs: int = 10
    batch_size: int = 128  # paper: minibatch 128
    lr: float = 0.01  # paper: 0.01
    momentum: float = 0.9
    weight_decay: float = 5e-4
    lr_decay: float = 2 / 3  # paper: lr *= 2/3 ...
    lr_decay_every: int = 20  # ... every 20 "iterations", read as epochs
    alpha: float = 1.0  # weight of E2 (paper: 1)
    e1: str = "levels"  # "levels" (Eq. 5 per level) | "matrix" (Eq. 7/8 with its scale fixed)
    e2: str = "balance"  # "balance" | "trace" (paper's -tr(H A H^T)) | "none"
    target: str = "signed"  # rho target for s^k = 0: "signed" -1 (opposite) | "binary" 0 (Eq. 5)
    reduction: str = "sum"  # "sum" over partners (escapes the h~=0 saddle) | "mean" (paper scale)
    grad_clip: float = 10.0  # max gradient norm; 0 = off (the "sum" scale blows up without it)
    head_init: str = "default"  # "default" (fan-in) | "paper" (U[0, 0.001]: the h~=0 saddle)
    memory_bank: bool = False  # also pair the batch with detached past outputs (as DPSH does)
    seed: int = 0
    device: str = "auto"  # "auto" = cuda when available, else cpu
    bf16: bool = True  # bf16 autocast for the network on CUDA (never on CPU)
    num_threads: int | None = None  # torch CPU threads for this run; None = leave as is

    def __post_init__(self) -> None:
        choices = {
            "layout": ("levels", "paper"),
            "e1": E1_MODES,
            "e2": E2_MODES,
            "target": TARGETS,
            "reduction": REDUCTIONS,
            "head_init": HEAD_INITS,
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(
                    f"TrainConfig.{name} must be one of {allowed}, got {getattr(self, name)!r}"
                )
        checks = {
            "n_bits": self.n_bits >= 1,
            "width": self.width > 0,
            "image_size": self.image_size >= 8,
            "epochs": self.epochs >= 1,
            "batch_size": self.batch_size >= 2,
            "lr": self.lr > 0,
            "momentum": 0 <= self.momentum < 1,
            "weight_decay": self.weight_decay >= 0,
            "lr_decay": 0 < self.lr_decay <= 1,
            "lr_decay_every": self.lr_decay_every >= 1,
            "alpha": self.alpha >= 0,
            "grad_clip": self.grad_clip >= 0,
            "num_threads": self.num_threads is None or self.num_threads >= 1,
        }
        for name, ok in checks.items():
            if not ok:
                raise ValueError(f"TrainConfig.{name} is out of range: {getattr(self, name)!r}")


@dataclass
class TrainResult:
    model: HashingNet
    history: list[dict[str, float]]
    checkpoint_path: Path


def resolve_device(name: str) -> torch.device:
    """Turn a config device name into a torch.device: "auto" picks cuda when available, so the
    same params file runs on a laptop and on a GPU node; an explicit "cuda" fails loudly."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as err:
        raise ValueError(f"device: cannot parse {name!r} ({err})") from err
    if device.type not in ("cpu", "cuda"):
        raise ValueError(f"device: {name!r} is not 'auto', 'cpu' or 'cuda[:N]'")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device: {name!r} was asked for but CUDA is not available")
    return device


def make_shdh_loss(
    config: TrainConfig,
    *,
    segment_sizes: Sequence[int],
    segment_levels: Sequence[int],
    layer_weights: Sequence[float],
) -> LossFn:
    """The SHDH objective (Eq. 7) with the config's modes, as a `loss_fn` for `train`."""
    fn = partial(
        shdh_loss,
        segment_sizes=segment_sizes,
        segment_levels=segment_levels,
        layer_weights=layer_weights,
        alpha=config.alpha,
        e1=config.e1,
        e2=config.e2,
        reduction=config.reduction,
        target=config.target,
    )

    def loss_fn(
        z: torch.Tensor, anc: torch.Tensor, bank: tuple[torch.Tensor, torch.Tensor] | None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        bank_z, bank_anc = bank if bank is not None else (None, None)
        return fn(z, anc, bank_z=bank_z, bank_anc=bank_anc)

    return loss_fn


@torch.no_grad()
def _forward_all(
    model: nn.Module, images: np.ndarray, idx: np.ndarray, batch_size: int, device: torch.device
) -> torch.Tensor:
    was_training = model.training
    model.eval()
    out = []
    for start in range(0, len(idx), batch_size):
        x = to_input(images[idx[start : start + batch_size]], model.image_size, device)
        out.append(model(x).float())  # (b, L)
    model.train(was_training)
    return torch.cat(out) if out else torch.zeros(0, model.n_bits, device=device)


@contextlib.contextmanager
def torch_threads(num_threads: int | None) -> Iterator[None]:
    """Run the block on num_threads torch CPU threads (None: as set), then restore the count.

    Float sums, and so trained weights and the signs of near-zero outputs, depend on the thread
    count; pinning it makes runs agree bit for bit across processes and machines.
    """
    old = torch.get_num_threads()
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    try:
        yield
    finally:
        torch.set_num_threads(old)


def outputs(
    model: HashingNet,
    images: np.ndarray,
    *,
    batch_size: int = 512,
    device: torch.device | str | None = None,
    num_threads: int | None = None,
) -> torch.Tensor:
    """The network's outputs z (N, L), eval mode, no grad, in fp32 (even where training used
    bf16, so that results do not depend on the precision of the card). `device` moves the model
    there first; None keeps it where it is."""
    if device is not None:
        model.to(resolve_device(str(device)))
    dev = next(model.parameters()).device
    with torch_threads(num_threads):
        return _forward_all(model, images, np.arange(len(images)), batch_size, dev)


def encode(
    model: HashingNet,
    images: np.ndarray,
    *,
    batch_size: int = 512,
    device: torch.device | str | None = None,
    num_threads: int | None = None,
) -> np.ndarray:
    """Codes sgn(z) in {-1, +1}, int8 (N, L), with sgn(0) = -1 (see `outputs`)."""
    z = outputs(model, images, batch_size=batch_size, device=device, num_threads=num_threads)
    return torch.where(z > 0, 1, -1).to(torch.int8).cpu().numpy()


def _sha256(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a, dtype=np.int64).tobytes()).hexdigest()


def _epoch_generator(seed: int, epoch: int) -> torch.Generator:
    state = np.random.SeedSequence([seed, epoch]).generate_state(2, dtype=np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


def _atomic_save(obj: dict[str, Any], path: Path) -> None:
    with atomic_path(path) as tmp, open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())  # a checkpoint must survive a power cut, not only a crash


def _read_checkpoint(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
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


def _config_from(ckpt: dict[str, Any], path: Path) -> TrainConfig:
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
    ckpt = _read_checkpoint(path, map_location)
    config = _config_from(ckpt, path)
    model = _build(config, ckpt["in_channels"], ckpt["segment_sizes"])
    model.load_state_dict(ckpt["model"])
    return model.to(map_location).eval(), config, ckpt


def _build(config: TrainConfig, in_channels: int, segment_sizes: Sequence[int]) -> HashingNet:
    return build_model(
        in_channels=in_channels,
        n_bits=config.n_bits,
        width=config.width,
        image_size=config.image_size,
        head_init=config.head_init,
        segment_sizes=segment_sizes,
    )


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


def _check_resume(
    ckpt: dict[str, Any], path: Path, config: TrainConfig, expected: dict[str, Any]
) -> None:
    saved = _config_from(ckpt, path)
    for f in fields(TrainConfig):
        if f.name in _RESUMABLE_FIELDS:
            continue
        if getattr(saved, f.name) != getattr(config, f.name):
            raise ValueError(
                f"checkpoint {path}: config field {f.name!r} is {getattr(saved, f.name)!r} there "
                f"but {getattr(config, f.name)!r} now; resume only with the same config"
            )
    for key, value in expected.items():
        if ckpt.get(key) != value:
            raise ValueError(f"checkpoint {path}: {key} differs from this run's ({value!r})")
    if ckpt["epoch"] > config.epochs:
        raise ValueError(
            f"checkpoint {path}: already trained {ckpt['epoch']} epochs > epochs={config.epochs}"
        )


def _resumable_checkpoint(
    resume: bool | str, path: Path, config: TrainConfig, identity: dict[str, Any]
) -> dict[str, Any] | None:
    if resume not in (True, False, "auto"):
        raise ValueError(f"train: resume must be True, False or 'auto', got {resume!r}")
    if not resume or (resume == "auto" and not path.is_file()):
        return None
    try:
        ckpt = _read_checkpoint(path)
        _check_resume(ckpt, path, config, identity)
    except ValueError as err:
        if resume != "auto":
            raise
        log.warning("not resuming: %s; training from scratch", err)
        return None
    log.info("resuming %s from epoch %d", path, ckpt["epoch"])
    return ckpt


def _probe_diagnostics(
    z: torch.Tensor, prev_codes: torch.Tensor
) -> tuple[dict[str, float], torch.Tensor]:
    """Does training move the codes? (METHOD.md: at the h~=0 saddle nothing moves.)"""
    codes = torch.where(z > 0, 1, -1).to(torch.int8).cpu()  # (P, L)
    stats = {
        "mean_abs_z": float(z.abs().mean()),
        "flip_fraction": float((codes != prev_codes).float().mean()),
        "bit_balance": float(codes.float().mean(0).abs().mean()),  # 0 = every bit half/half
    }
    return stats, codes


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
    loss_fn: LossFn | None = None,
    resume: bool | str = False,
    progress: bool = True,
    on_epoch: Callable[[dict[str, float]], None] | None = None,
) -> TrainResult:
    """Train a HashingNet on images[train_idx]; checkpoint to out_dir/checkpoint.pt every epoch.

    ancestors: (N, K) ancestor ids, or (N, K, M) ancestor sets (multi-label items, -1 padded),
    handed to loss_fn batch by batch.

    loss_fn defaults to SHDH (`make_shdh_loss`). on_epoch(entry) is called after each epoch's
    checkpoint is written (e.g. to log to MLflow). resume: True continues the checkpoint and
    fails, naming it, if it is missing or was made with other settings or data; "auto"
    continues it when it matches and starts afresh otherwise (what `dvc repro` uses, so an
    interrupted pipeline picks up where it stopped but a changed one retrains).
    """
    ancestors = np.asarray(ancestors)
    train_idx = np.asarray(train_idx)
    segment_sizes = [int(s) for s in segment_sizes]
    segment_levels = [int(k) for k in segment_levels]
    layer_weights = [float(w) for w in layer_weights]
    _check_inputs(
        config, images, ancestors, train_idx, segment_sizes, segment_levels, layer_weights
    )
    if loss_fn is None:
        loss_fn = make_shdh_loss(
            config,
            segment_sizes=segment_sizes,
            segment_levels=segment_levels,
            layer_weights=layer_weights,
        )
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    ckpt_path = out_dir / CHECKPOINT_NAME
    device = resolve_device(config.device)
    in_channels = 1 if images.ndim == 3 else int(images.shape[3])
    identity = {  # what a checkpoint must agree on, besides the config, to be resumed
        "in_channels": in_channels,
        "segment_sizes": segment_sizes,
        "segment_levels": segment_levels,
        "layer_weights": layer_weights,
        "train_idx_sha256": _sha256(train_idx),
    }
    ckpt = _resumable_checkpoint(resume, ckpt_path, config, identity)

    cuda_devices = [device] if device.type == "cuda" else []
    # Seeds stay local to this run.
    with torch_threads(config.num_threads), torch.random.fork_rng(devices=cuda_devices):
        torch.manual_seed(config.seed)
        return _run(
            config,
            images,
            ancestors,
            train_idx,
            device,
            in_channels,
            identity,
            loss_fn,
            ckpt,
            ckpt_path,
            progress,
            on_epoch,
        )


def _run(
    config: TrainConfig,
    images: np.ndarray,
    ancestors: np.ndarray,
    train_idx: np.ndarray,
    device: torch.device,
    in_channels: int,
    identity: dict[str, Any],
    loss_fn: LossFn,
    ckpt: dict[str, Any] | None,
    ckpt_path: Path,
    progress: bool,
    on_epoch: Callable[[dict[str, float]], None] | None,
) -> TrainResult:
    model = _build(config, in_channels, identity["segment_sizes"]).to(device)
    optimizer = torch.optim.SGD(
        model.parameters(), lr=config.lr, momentum=config.momentum, weight_decay=config.weight_decay
    )
    scheduler = torch.optim.lr_scheduler.StepLR(
        optimizer, step_size=config.lr_decay_every, gamma=config.lr_decay
    )
    n_train = len(train_idx)
    # (n, K) ancestor ids, or (n, K, M) ancestor sets of multi-label items
    anc_train = torch.as_tensor(ancestors[train_idx], dtype=torch.long, device=device)
    probe_rng = np.random.default_rng([config.seed, 1])  # local: the probe set is fixed per seed
    probe = np.sort(probe_rng.choice(n_train, size=min(PROBE_SIZE, n_train), replace=False))
    probe_idx = train_idx[probe]
    bank_z = torch.zeros(n_train if config.memory_bank else 0, config.n_bits, device=device)
    bank_filled = torch.zeros(len(bank_z), dtype=torch.bool, device=device)
    history: list[dict[str, float]] = []
    start_epoch = 0
    if ckpt is None:
        z_probe = _forward_all(model, images, probe_idx, 512, device)
        probe_codes = torch.where(z_probe > 0, 1, -1).to(torch.int8).cpu()
    else:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        history, start_epoch = list(ckpt["history"]), int(ckpt["epoch"])
        probe_codes = ckpt["probe_codes"]
        if config.memory_bank:
            bank_z.copy_(ckpt["bank_z"])
            bank_filled.copy_(ckpt["bank_filled"])
        torch.set_rng_state(ckpt["rng_cpu"])
        if device.type == "cuda" and ckpt.get("rng_cuda") is not None:
            torch.cuda.set_rng_state(ckpt["rng_cuda"], device)
    autocast = torch.autocast(
        device_type=device.type, dtype=torch.bfloat16, enabled=config.bf16 and device.type == "cuda"
    )
    n_batches = math.ceil(n_train / config.batch_size)

    for epoch in range(start_epoch + 1, config.epochs + 1):
        model.train()
        lr = optimizer.param_groups[0]["lr"]
        order = torch.randperm(n_train, generator=_epoch_generator(config.seed, epoch)).numpy()
        sums = {"loss": 0.0, "e1": 0.0, "e2": 0.0}
        n_steps, n_seen = 0, 0
        t0 = time.perf_counter()
        bar = tqdm(
            total=n_batches,
            desc=f"epoch {epoch}/{config.epochs}",
            disable=not progress,
            leave=False,
        )
        for step, start in enumerate(range(0, n_train, config.batch_size), start=1):
            pos = order[start : start + config.batch_size]
            if len(pos) < 2:  # a lone trailing item has no in-batch partner
                continue
            x = to_input(images[train_idx[pos]], config.image_size, device)  # (b, C, S, S)
            pos_t = torch.as_tensor(pos, device=device)
            anc = anc_train[pos_t]  # (b, K) or (b, K, M) ancestor sets
            bank = None
            if config.memory_bank:
                use = bank_filled.clone()
                use[pos_t] = False  # the batch is already paired with itself
                bank = (bank_z[use], anc_train[use])
            with autocast:
                z = model(x)  # (b, L)
            loss, parts = loss_fn(z.float(), anc, bank)  # outside autocast: fp32 loss
            loss_value = loss.detach().item()
            if not math.isfinite(loss_value):
                bar.close()
                last = (
                    f"last good checkpoint: {ckpt_path} (epoch {epoch - 1}), left untouched"
                    if epoch > 1
                    else "no checkpoint was written yet"
                )
                raise TrainingDivergedError(
                    f"loss is {loss_value} at epoch {epoch}, step {step}; {last}"
                )
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if config.grad_clip > 0:
                nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
            optimizer.step()
            if config.memory_bank:
                bank_z[pos_t] = z.detach().float()
                bank_filled[pos_t] = True
            sums["loss"] += loss_value
            sums["e1"] += float(parts.get("e1", math.nan))
            sums["e2"] += float(parts.get("e2", math.nan))
            for key in parts.keys() - {"e1", "e2"}:  # a method's own diagnostics (accuracy)
                sums[key] = sums.get(key, 0.0) + float(parts[key])
            n_steps += 1
            n_seen += len(pos)
            bar.update(1)
            bar.set_postfix(loss=f"{loss_value:.4f}", refresh=False)
        bar.close()
        seconds = time.perf_counter() - t0
        scheduler.step()

        z_probe = _forward_all(model, images, probe_idx, 512, device)  # (P, L)
        stats, probe_codes = _probe_diagnostics(z_probe, probe_codes)
        entry = {
            "epoch": epoch,
            **{k: v / max(n_steps, 1) for k, v in sums.items()},
            "lr": lr,
            "seconds": seconds,
            "images_per_sec": n_seen / seconds if seconds > 0 else math.inf,
            **stats,
        }
        history.append(entry)
        state = {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "epoch": epoch,
            "config": asdict(config),
            "history": history,
            "probe_codes": probe_codes,
            "rng_cpu": torch.get_rng_state(),
            "rng_cuda": torch.cuda.get_rng_state(device) if device.type == "cuda" else None,
            **identity,
        }
        if config.memory_bank:
            state["bank_z"], state["bank_filled"] = bank_z, bank_filled
        _atomic_save(state, ckpt_path)
        if on_epoch is not None:
            on_epoch(entry)
    model.eval()
    return TrainResult(model=model, history=history, checkpoint_path=ckpt_path)
