"""The epoch loop shared by the deep hashing methods: checkpoints, resume, progress, device.

The loss is a pluggable callable `loss_fn(z, anc_batch, bank) -> (loss, parts)` (bank is None or
(bank_z, bank_anc)), so that SHDH (paper Eq. 7, `shdh.losses.SHDHObjective`), DPSH and the
classifier oracle share one loop that knows none of them; a `shdh.losses.Loss` also carries the
settings it was made from, which every checkpoint records. Optimisation follows the paper's
Algorithm 1: minibatch 128, SGD lr 0.01, lr *= 2/3 every 20 "iterations" (read as epochs).
Gradient-norm clipping is on by default because docs/method.md records that the
sum-over-partners loss scale, which leaves the h~ = 0 saddle, blows up without it.

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
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from shdh import convergence
from shdh.checkpoint_writer import CheckpointWriter
from shdh.code_fingerprint import differing, fingerprint
from shdh.cuda_graph_step import GraphedStep
from shdh.devices import resolve_device
from shdh.loop import RUNTIME_FIELDS, TrainConfig
from shdh.nets.cnnf import to_input
from shdh.nets.hashing import HashingNet, build_model

log = logging.getLogger(__name__)

CHECKPOINT_NAME = "checkpoint.pt"
PROBE_SIZE = 1000  # training items whose codes are tracked across epochs
# Fields that may differ between a checkpoint and the config resuming it: they do not change
# what is computed (epochs may grow so that a finished run can be extended).
_RESUMABLE_FIELDS = ("epochs", *RUNTIME_FIELDS)
# "never" trains afresh; "always" continues the checkpoint and fails, naming it, when it is
# missing or from other settings or data; "auto" continues a matching one, else starts afresh.
RESUME_MODES = ("never", "auto", "always")
_SGD_KERNELS = ("fused", "foreach")  # an SGD param group's implementation, not its arithmetic

LossFn = Callable[
    [torch.Tensor, torch.Tensor, tuple[torch.Tensor, torch.Tensor] | None],
    tuple[torch.Tensor, dict[str, torch.Tensor]],
]
# validate(model, query_idx, database_idx) -> the validation score (shdh.convergence): indices
# into the images, the model as trained so far.
Validate = Callable[[HashingNet, np.ndarray, np.ndarray], float]


class TrainingDivergedError(RuntimeError):
    """The loss became NaN or inf; the last good checkpoint was left as it was."""


@dataclass
class TrainResult:
    model: HashingNet
    history: list[dict[str, float]]
    checkpoint_path: Path


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
    return _signs(z).numpy()


def _signs(z: torch.Tensor) -> torch.Tensor:
    """sgn(z) in {-1, +1} as int8 on the host, with sgn(0) = -1."""
    return torch.where(z > 0, 1, -1).to(torch.int8).cpu()


def _sha256(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a, dtype=np.int64).tobytes()).hexdigest()


def _epoch_generator(seed: int, epoch: int) -> torch.Generator:
    state = np.random.SeedSequence([seed, epoch]).generate_state(2, dtype=np.uint32)
    return torch.Generator().manual_seed(int(state[0]) << 32 | int(state[1]))


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


def _resumable_checkpoint(
    resume: str, path: Path, config: TrainConfig, identity: dict[str, Any]
) -> dict[str, Any] | None:
    check_resume_mode(resume)
    if resume == "never" or (resume == "auto" and not path.is_file()):
        return None
    try:
        ckpt = _read_checkpoint(path)
        _check_resume(ckpt, path, config, identity)
    except ValueError as err:
        if resume == "always":
            raise
        log.warning("not resuming: %s; training from scratch", err)
        return None
    log.info("resuming %s from epoch %d", path, ckpt["epoch"])
    return ckpt


# -- where the training images live, and how a batch reaches the network ------------------------

# The uint8 training images stay on the GPU for the whole run when they take at most this share
# of its free memory: gathering a batch there costs no host work and no copy. Fashion-MNIST-H
# (63,000 x 28 x 28) is 49 MB and CIFAR-100 (54,000 x 32 x 32 x 3) 166 MB, far below it.
RESIDENT_SHARE = 0.5
# A host sync drains the GPU's queue; the loop reads its losses back once per this many steps
# (and at the end of each epoch) to watch for a non-finite loss and refresh the progress bar.
SYNC_EVERY = 50


def data_path(nbytes: int, device: torch.device, free_bytes: int | None = None) -> str:
    """How the training images reach `device`: "host" (CPU training: batches indexed from the
    array as they are), "resident" (copied to the GPU once, batches gathered there) or "pinned"
    (too big for the GPU: gathered on the host into page-locked buffers, copied asynchronously)."""
    if device.type != "cuda":
        return "host"
    if free_bytes is None:
        free_bytes = torch.cuda.mem_get_info(device)[0]
    return "resident" if nbytes <= RESIDENT_SHARE * free_bytes else "pinned"


class _Batches:
    """The training images of one run, as a source of uint8 batches on the training device.

    Batches are addressed by positions into train_idx. On the CPU a batch is indexed from the
    array exactly as before this class existed, so CPU results are bit-identical; on a GPU the
    conversion to float (`to_input`) happens on the device in every path.
    """

    def __init__(
        self, images: np.ndarray, train_idx: np.ndarray, device: torch.device, batch_size: int
    ) -> None:
        self.images, self.train_idx, self.device = images, train_idx, device
        item_bytes = int(np.prod(images.shape[1:])) * images.itemsize
        self.mode = data_path(item_bytes * len(train_idx), device)
        size = f"{item_bytes * len(train_idx) / 2**20:.0f} MiB"
        if self.mode == "resident":
            self.resident = torch.from_numpy(np.ascontiguousarray(images[train_idx])).to(device)
            log.info("training images: resident on %s (%s), batches gathered there", device, size)
        elif self.mode == "pinned":
            shape = (batch_size, *images.shape[1:])
            self.staging = [torch.empty(shape, dtype=torch.uint8).pin_memory() for _ in range(2)]
            self.copied = [None, None]  # the CUDA event of each staging buffer's last copy
            self.turn = 0
            log.info(
                "training images: %s do not fit on %s; pinned host buffers, asynchronous copies",
                size,
                device,
            )
        else:
            log.info("training images: %s in host memory, batches indexed there", size)

    def gather(self, pos: torch.Tensor, pos_on_device: torch.Tensor) -> torch.Tensor:
        """uint8 (b, H, W[, C]) images at positions `pos` (a CPU tensor; the same positions on
        the training device: `pos_on_device`), on the device."""
        if self.mode == "resident":
            return self.resident[pos_on_device]
        rows = self.train_idx[pos.numpy()]
        if self.mode == "host":
            return torch.as_tensor(self.images[rows])
        buf = self.staging[self.turn][: len(rows)]
        if self.copied[self.turn] is not None:
            self.copied[self.turn].synchronize()  # the copy out of this buffer two steps ago
        np.take(self.images, rows, axis=0, out=buf.numpy())
        batch = buf.to(self.device, non_blocking=True)
        self.copied[self.turn] = torch.cuda.Event()
        self.copied[self.turn].record()
        self.turn = 1 - self.turn
        return batch


class _LossLog:
    """One epoch's loss and its parts, kept on the device step by step and read back every
    SYNC_EVERY steps: reading a value is a host sync, which drains the GPU's queue.

    The epoch means are sums, in step order and in float64, of the fp32 values, as a
    `loss.item()` per step used to give, so the history is the same to the last bit."""

    def __init__(self, n_steps: int, device: torch.device) -> None:
        self.values: dict[str, torch.Tensor] = {}
        self.n_steps, self.device = n_steps, device
        self.steps: list[int] = []  # the loop's step number of each record (lone items skip one)
        self.checked = 0
        self.last = math.nan  # the last loss read back, for the progress bar

    def add(self, step: int, loss: torch.Tensor, parts: dict[str, torch.Tensor]) -> None:
        i = len(self.steps)
        for key, value in {"loss": loss, **parts}.items():
            if key not in self.values:
                self.values[key] = torch.full(
                    (self.n_steps,), math.nan, dtype=torch.float64, device=self.device
                )
            self.values[key][i] = value.detach()
        self.steps.append(step)

    def first_non_finite(self) -> tuple[int, float] | None:
        """(step, loss) of the first non-finite loss since the last check, or None."""
        new = self.values["loss"][self.checked : len(self.steps)].tolist() if self.steps else []
        if new:  # the bar shows it: read with the check, not in a host sync of its own
            self.last = new[-1]
        for offset, value in enumerate(new):
            if not math.isfinite(value):
                return self.steps[self.checked + offset], value
        self.checked = len(self.steps)
        return None

    def means(self) -> dict[str, float]:
        """Per-step means; e1 and e2 are NaN for a loss without those parts (the oracle's)."""
        n = len(self.steps)
        sums = {key: math.nan for key in ("loss", "e1", "e2")}
        for key, values in self.values.items():
            total = 0.0
            for value in values[:n].tolist():  # not sum(): Python 3.12 compensates its rounding
                total += value
            sums[key] = total
        return {key: value / max(n, 1) for key, value in sums.items()}


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
    loss_fn: LossFn,
    resume: str = "never",
    progress: Callable[[int, str], Any] | None = None,
    on_epoch: Callable[[dict[str, float]], None] | None = None,
    code: dict[str, str] | None = None,
    validate: Validate | None = None,
) -> TrainResult:
    """Train a HashingNet on images[train_idx]; checkpoint to out_dir/checkpoint.pt after every
    epoch, or every config.checkpoint_seconds and after the last one.

    ancestors: (N, K) ancestor ids, or (N, K, M) ancestor sets (multi-label items, -1 padded),
    handed to loss_fn batch by batch.

    loss_fn: the method's batch loss (a shdh.losses.Loss, or any callable of that shape; a
    Loss's settings must match for a checkpoint to be resumed). on_epoch(entry) is called after
    each epoch, once its checkpoint (when one is due) is handed to the writer (e.g. to log to
    MLflow; on a GPU the file may still be being written, shdh.checkpoint_writer). resume: one
    of RESUME_MODES; "auto" is what `dvc repro` uses, so an interrupted pipeline picks up where
    it stopped but a changed one retrains. progress(total, description) makes each epoch's bar
    (shdh.progress.bars); None: no bar. code: the digests of the code that decides the numbers
    (shdh.code_fingerprint; default: this loop's and the loss's modules, with what they import);
    a checkpoint made by other code is not resumed. validate: how the method scores held-out
    items (needed when config.val_size > 0; shdh.convergence says what is held out and how the
    score schedules and stops the fit).
    """
    ancestors = np.asarray(ancestors)
    train_idx = np.asarray(train_idx)
    segment_sizes = [int(s) for s in segment_sizes]
    segment_levels = [int(k) for k in segment_levels]
    layer_weights = [float(w) for w in layer_weights]
    _check_inputs(
        config, images, ancestors, train_idx, segment_sizes, segment_levels, layer_weights
    )
    if config.val_size > 0 and validate is None:
        raise ValueError("train: val_size > 0 needs a validate function to score held-out items")
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
        "loss": getattr(loss_fn, "settings", None),  # a shdh.losses.Loss names its settings
        "code": code or fingerprint([__name__, type(loss_fn).__module__]),
    }
    ckpt = _resumable_checkpoint(resume, ckpt_path, config, identity)
    run = _Run(config, device, identity, loss_fn, ckpt_path, progress, on_epoch, validate)
    cuda_devices = [device] if device.type == "cuda" else []
    # Seeds stay local to this run.
    with torch_threads(config.num_threads), torch.random.fork_rng(devices=cuda_devices):
        torch.manual_seed(config.seed)
        return run(images, ancestors, train_idx, ckpt)


# -- one run, by responsibility: its state and resume, checkpoints, the probe codes, validation
# and the schedule, the step, the epoch; _Run puts them together --------------------------------


@dataclass
class _State:
    """What a checkpoint restores: the network, its optimiser and schedule, the history, the
    probe codes and the memory bank (empty without one)."""

    model: HashingNet
    optimizer: torch.optim.Optimizer
    scheduler: Any  # StepLR or ReduceLROnPlateau (shdh.convergence.make_scheduler)
    history: list[dict[str, float]]
    probe_codes: torch.Tensor
    bank_z: torch.Tensor
    bank_filled: torch.Tensor
    epoch: int = 0

    def load(self, ckpt: dict[str, Any], memory_bank: bool, device: torch.device) -> None:
        """Continue from a checkpoint: weights, optimiser, schedule, history and RNG state."""
        self.model.load_state_dict(ckpt["model"])
        # torch restores a group's kernel choice with its hyperparameters; the kernels are this
        # run's to choose (a GPU fit's fused SGD would otherwise follow its checkpoint to a CPU)
        kernels = [{k: g[k] for k in _SGD_KERNELS if k in g} for g in self.optimizer.param_groups]
        self.optimizer.load_state_dict(ckpt["optimizer"])
        for group, chosen in zip(self.optimizer.param_groups, kernels, strict=True):
            group.update(chosen)
        self.scheduler.load_state_dict(ckpt["scheduler"])
        self.history, self.epoch = list(ckpt["history"]), int(ckpt["epoch"])
        self.probe_codes = ckpt["probe_codes"]
        if memory_bank:
            self.bank_z.copy_(ckpt["bank_z"])
            self.bank_filled.copy_(ckpt["bank_filled"])
        torch.set_rng_state(ckpt["rng_cpu"])
        if device.type == "cuda" and ckpt.get("rng_cuda") is not None:
            torch.cuda.set_rng_state(ckpt["rng_cuda"], device)


def make_optimizer(
    config: TrainConfig, model: torch.nn.Module, device: torch.device
) -> torch.optim.SGD:
    """The paper's SGD with momentum and weight decay; one fused kernel where config.fused_sgd
    asks for it on a GPU (fused=None keeps torch's choice: the CPU's fits stay bit for bit)."""
    return torch.optim.SGD(
        model.parameters(),
        lr=config.lr,
        momentum=config.momentum,
        weight_decay=config.weight_decay,
        fused=True if config.fused_sgd and device.type == "cuda" else None,
    )


def _restore(
    config: TrainConfig,
    device: torch.device,
    identity: dict[str, Any],
    ckpt: dict[str, Any] | None,
    n_train: int,
    probe: "_Probe",
) -> _State:
    """A fresh model, optimiser and schedule, or the checkpoint's, RNG state included."""
    model = _build(config, identity["in_channels"], identity["segment_sizes"])
    model = model.to(device)
    if device.type == "cuda":  # NHWC convolutions run faster on tensor cores; not on CPU
        model = model.to(memory_format=torch.channels_last)
    optimizer = make_optimizer(config, model, device)
    scheduler = convergence.make_scheduler(config, optimizer)
    n_bank = n_train if config.memory_bank else 0
    state = _State(
        model,
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


class _Checkpoints:
    """The run's checkpoint file: written after an epoch when config.checkpoint_seconds have
    passed since the last one, and after the last epoch (on a GPU by a background writer)."""

    def __init__(
        self, path: Path, config: TrainConfig, device: torch.device, identity: dict[str, Any]
    ) -> None:
        self.config, self.device, self.identity = config, device, identity
        self.writer = CheckpointWriter(path, background=device.type == "cuda")
        self.written = time.perf_counter()

    def after_epoch(self, state: _State, last: bool) -> None:
        if last or time.perf_counter() - self.written >= self.config.checkpoint_seconds:
            self.writer.write(self._contents(state))
            self.written = time.perf_counter()

    def wait(self) -> None:
        self.writer.wait()

    def _contents(self, state: _State) -> dict[str, Any]:
        checkpoint = {
            "model": state.model.state_dict(),
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


@dataclass
class _Probe:
    """Training items whose codes are followed across epochs: does training move the codes?
    (docs/method.md: at the h~=0 saddle nothing moves.)"""

    images: np.ndarray
    idx: np.ndarray
    device: torch.device

    @classmethod
    def choose(
        cls, images: np.ndarray, train_idx: np.ndarray, seed: int, device: torch.device
    ) -> "_Probe":
        n_train = len(train_idx)
        rng = np.random.default_rng([seed, 1])  # local: one probe set per seed
        probe = np.sort(rng.choice(n_train, size=min(PROBE_SIZE, n_train), replace=False))
        return cls(images, train_idx[probe], device)

    def codes(self, model: HashingNet) -> torch.Tensor:
        return _signs(self._outputs(model))

    def diagnostics(self, state: _State) -> dict[str, float]:
        """The probe's output scale, the share of its bits flipped since the last epoch (the
        new codes replace state.probe_codes) and the bits' balance."""
        z = self._outputs(state.model)
        codes = _signs(z)  # (P, L)
        stats = {
            "mean_abs_z": float(z.abs().mean()),
            "flip_fraction": float((codes != state.probe_codes).float().mean()),
            "bit_balance": float(codes.float().mean(0).abs().mean()),  # 0 = every bit half/half
        }
        state.probe_codes = codes
        return stats

    def _outputs(self, model: HashingNet) -> torch.Tensor:
        return _forward_all(model, self.images, self.idx, 512, self.device)  # (P, L)


@dataclass
class _Schedule:
    """After each epoch: the validation score on the held-out items (none without them), the
    learning rate schedule's step on it and, with the plateau schedule, whether to stop."""

    config: TrainConfig
    validate: Validate | None
    queries: np.ndarray
    database: np.ndarray

    def after_epoch(self, entry: dict[str, Any], state: _State) -> bool:
        """Whether the fit stops here; the score and its seconds are entered in `entry`."""
        score = self._score(entry, state.model)
        stopped = convergence.step_schedule(self.config, state.scheduler, score)
        if self.config.schedule == "plateau":
            entry[convergence.STOP_KEY] = stopped
        return stopped

    def _score(self, entry: dict[str, Any], model: HashingNet) -> float | None:
        if len(self.queries) == 0:
            return None
        start = time.perf_counter()
        score = float(self.validate(model, self.queries, self.database))
        entry[convergence.VAL_METRIC] = score
        entry["val_seconds"] = time.perf_counter() - start
        return score


class _TrainStep:
    """The training step on one batch: uint8 images (b, H, W[, C]) on the device and their
    positions in the training set (on the device) -> the detached (loss, parts). Every step goes
    through one GraphedStep; its CUDA graph replays the full batches where config.cuda_graph
    asks for it (not with a memory bank, whose partners change in number from step to step) and
    is off otherwise."""

    def __init__(
        self,
        config: TrainConfig,
        device: torch.device,
        state: _State,
        loss_fn: LossFn,
        anc_train: torch.Tensor,
    ) -> None:
        self.config, self.device, self.state = config, device, state
        self.loss_fn, self.anc_train = loss_fn, anc_train
        self.model = _step_model(state.model, config.compile)
        self.graphed = config.cuda_graph and device.type == "cuda" and not config.memory_bank
        self.step = GraphedStep(self._forward_backward, state.optimizer, device, graph=self.graphed)

    def __call__(
        self, images: torch.Tensor, pos_t: torch.Tensor, *, full: bool
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """full: whether the batch has batch_size items (only those replay the graph)."""
        inputs = (images, self.anc_train[pos_t], pos_t)
        return self.step(*inputs) if full else self.step.eager(*inputs)

    def _forward_backward(
        self, images: torch.Tensor, anc: torch.Tensor, pos_t: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        config, device, state = self.config, self.device, self.state
        x = to_input(images, config.image_size, device)  # (b, C, S, S)
        if device.type == "cuda":
            x = x.contiguous(memory_format=torch.channels_last)
        autocast = torch.autocast(
            device_type=device.type,
            dtype=torch.bfloat16,
            enabled=config.bf16 and device.type == "cuda",
            cache_enabled=not self.graphed,  # a CUDA graph must not keep autocast's weight casts
        )
        with autocast:
            z = self.model(x)  # (b, L)
        bank = _bank(state, self.anc_train, pos_t)
        loss, parts = self.loss_fn(z.float(), anc, bank)  # outside autocast: fp32
        loss.backward()
        if config.grad_clip > 0:
            nn.utils.clip_grad_norm_(state.model.parameters(), config.grad_clip)
        state.optimizer.step()
        if config.memory_bank:
            state.bank_z[pos_t] = z.detach().float()
            state.bank_filled[pos_t] = True
        return loss.detach(), {k: v.detach() for k, v in parts.items()}


def _step_model(model: HashingNet, compile_it: bool) -> nn.Module:
    """The module the training steps call: the model, or its torch.compile'd form (the same
    parameters; checkpoints and encoding use the model itself)."""
    if not compile_it:
        return model
    log.info("compiling the network with torch.compile (the first steps take longer)")
    return torch.compile(model)


@dataclass
class _Epochs:
    """The passes over the training items, each in the seeded (seed, epoch) order, guarded
    against a non-finite loss."""

    config: TrainConfig
    step: _TrainStep
    batches: _Batches
    progress: Callable[[int, str], Any] | None  # progress(total, description) -> a bar
    ckpt_path: Path  # named when a non-finite loss stops the fit

    def run(self, epoch: int, state: _State) -> dict[str, float]:
        """One epoch's history entry: the mean losses, the lr and the throughput."""
        config, device = self.config, self.batches.device
        n_train = len(self.batches.train_idx)
        state.model.train()
        lr = state.optimizer.param_groups[0]["lr"]
        order = torch.randperm(n_train, generator=_epoch_generator(config.seed, epoch))
        order_on_device = order.to(device)  # one copy per epoch, none per step
        losses = _LossLog(math.ceil(n_train / config.batch_size), device)
        n_seen, t0 = 0, time.perf_counter()
        desc = f"epoch {epoch}/{config.epochs}"
        bar = self.progress(losses.n_steps, desc) if self.progress else _NoBar()
        for step, start in enumerate(range(0, n_train, config.batch_size), start=1):
            pos = order[start : start + config.batch_size]
            if len(pos) < 2:  # a lone trailing item has no in-batch partner
                continue
            pos_t = order_on_device[start : start + config.batch_size]
            full = len(pos) == config.batch_size
            loss, parts = self.step(self.batches.gather(pos, pos_t), pos_t, full=full)
            losses.add(step, loss, parts)
            n_seen += len(pos)
            if len(losses.steps) % SYNC_EVERY == 0:
                self._guard(losses, epoch, bar)
            bar.update(1)
        self._guard(losses, epoch, bar)
        bar.close()
        seconds = time.perf_counter() - t0  # the guard above waited for the GPU to finish
        return {
            "epoch": epoch,
            **losses.means(),
            "lr": lr,
            "seconds": seconds,
            "images_per_sec": n_seen / seconds if seconds > 0 else math.inf,
        }

    def _guard(self, losses: _LossLog, epoch: int, bar: Any) -> None:
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
    loss_fn: LossFn
    ckpt_path: Path
    progress: Callable[[int, str], Any] | None  # progress(total, description) -> a bar
    on_epoch: Callable[[dict[str, float]], None] | None
    validate: Validate | None = None

    def __call__(
        self,
        images: np.ndarray,
        ancestors: np.ndarray,
        train_idx: np.ndarray,
        ckpt: dict[str, Any] | None,
    ) -> TrainResult:
        config, device = self.config, self.device
        split = convergence.validation_split(len(train_idx), config.val_size, config.seed)
        schedule = _Schedule(
            config, self.validate, train_idx[split.queries], train_idx[split.database]
        )
        train_idx = train_idx[split.train]
        # (n, K) ancestor ids, or (n, K, M) ancestor sets of multi-label items
        anc_train = torch.as_tensor(ancestors[train_idx], dtype=torch.long, device=device)
        probe = _Probe.choose(images, train_idx, config.seed, device)
        state = _restore(config, device, self.identity, ckpt, len(train_idx), probe)
        batches = _Batches(images, train_idx, device, config.batch_size)
        step = _TrainStep(config, device, state, self.loss_fn, anc_train)
        epochs = _Epochs(config, step, batches, self.progress, self.ckpt_path)
        checkpoints = _Checkpoints(self.ckpt_path, config, device, self.identity)
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
                checkpoints.after_epoch(state, last=stopped or epoch == config.epochs)
                if self.on_epoch is not None:
                    self.on_epoch(state.history[-1])
        checkpoints.wait()
        _warn_if_cut_short(config, state.history)
        state.model.eval()
        return TrainResult(model=state.model, history=state.history, checkpoint_path=self.ckpt_path)


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


def _bank(
    state: _State, anc_train: torch.Tensor, pos_t: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The memory bank's partners for a batch: the filled entries, the batch's own left out
    (it is already paired with itself). None without a bank."""
    if len(state.bank_z) == 0:
        return None
    use = state.bank_filled.clone()
    use[pos_t] = False
    return state.bank_z[use], anc_train[use]


class _NoBar:
    """What the loop calls on a progress bar, doing nothing: no bar was asked for."""

    def update(self, n: int = 1) -> None: ...

    def set_postfix(self, **kwargs: Any) -> None: ...

    def close(self) -> None: ...


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
