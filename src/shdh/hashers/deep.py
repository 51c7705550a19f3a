"""What every deep method shares: one class, DeepHasher, read top to bottom: its settings, fit,
save and load, and encoding.

A deep method is its objective (a shdh.training.objective.Objective: the loss, with its
equations), its settings dataclass (shdh.hashers.method_settings) and one catalogue entry
(shdh.hashers.method_catalogue); its module declares `class NAME(DeepHasher)` with that
objective, and with the code's layout where it is not one segment (SHDH's per-level segments).
Everything else is here and in the loop (shdh.training.loop): one backbone, one optimiser, the
same budget, data, seeds, checkpoints and resume, code fingerprint, DDP, CPU pin and CUDA path.

Checkpoints go to `work_dir` (a temporary directory when it is None). `fit(..., resume=...)`
continues a checkpoint there when its record agrees (shdh.hashers.deep_record). Saved state (no
pickle): the network weights as named arrays "net.<parameter>" beside the code's layout.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from shdh.core.batch_pairs import check_labelled
from shdh.core.metrics import evaluate
from shdh.hashers.base import Hasher
from shdh.hashers.deep_record import RUN_FILE, check_images, record_problem, run_record
from shdh.hashers.method_catalogue import method
from shdh.ranking.exact import pack_codes
from shdh.runtime import source_fingerprint
from shdh.runtime.atomic import atomic_path, atomic_write_text
from shdh.training import checkpoint, inference
from shdh.training import loop as training
from shdh.training.loop_settings import (
    DEFAULT_LOOP,
    RUNTIME_FIELDS,
    LoopSettings,
    TrainConfig,
    settings_of,
)
from shdh.training.objective import Objective, Task, one_segment

log = logging.getLogger(__name__)

VAL_DEPTH = 100  # the validation score is NDCG@100, the tables' headline metric
NET_PREFIX = "net."  # state.npz keys of the network weights
STATE_FIELDS = ("K_", "segment_sizes_", "segment_levels_", "layer_weights_", "image_shape_")


class DeepHasher(Hasher):
    """A network trained on images with a method's objective; codes sgn(z) of its hashing head.

    Constructor: n_bits, seed, loop (the shared backbone and loop settings, a LoopSettings or
    its mapping), settings (the method's own, its settings dataclass or its mapping; None: the
    defaults) and work_dir (the checkpoint's folder; None: a temporary one).
    """

    input_kind: ClassVar[str] = "images"
    objective: ClassVar[type[Objective]]  # the method's loss, set by each method's class
    training_files: ClassVar[tuple[str, ...]] = (checkpoint.CHECKPOINT_NAME, RUN_FILE)

    def __init__(
        self,
        *,
        n_bits: int,
        seed: int = 0,
        loop: LoopSettings = DEFAULT_LOOP,
        settings: Any = None,
        work_dir: str | None = None,
    ) -> None:
        super().__init__(n_bits=n_bits, seed=seed)
        self.work_dir = work_dir
        try:  # made and checked here, so that a bad value fails at construction, by name
            self.loop = LoopSettings.of(loop)
            self.settings = settings_of(self.settings_class(), settings, "settings")
        except (TypeError, ValueError) as err:
            raise ValueError(f"{self.name}: {err}") from err

    @classmethod
    def settings_class(cls) -> type:
        """The method's settings dataclass, as the catalogue declares it."""
        return method(cls.name).settings

    @classmethod
    def _saved_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        """The loop's runtime settings (device, threads, compile...) say how the fit ran, not
        what the model is: they load as their defaults, so that a model trained with
        `device: cuda` encodes in a CPU-only evaluate step or search service (device auto)."""
        loop = params.get("loop")
        if isinstance(loop, dict):
            params = {**params, "loop": {k: v for k, v in loop.items() if k not in RUNTIME_FIELDS}}
        return params

    def train_config(self) -> TrainConfig:
        """The TrainConfig these settings mean (checked by TrainConfig itself)."""
        try:
            return TrainConfig(
                **dataclasses.asdict(self.loop),
                n_bits=self.n_bits,
                seed=self.seed,
                memory_bank=bool(getattr(self.settings, "memory_bank", False)),
                head_norm=self.objective.head_norm,
            )
        except (TypeError, ValueError) as err:
            raise ValueError(f"{self.name}: {err}") from err

    # -- the code's layout: one segment unless a method says otherwise ------------------------

    def code_layout(self, K: int) -> tuple[list[int], list[int]]:
        """(segment sizes, their 1-based tree levels) for a tree of height K."""
        return one_segment(self.n_bits, K)

    def _net_layout(self, sizes: list[int], levels: list[int]) -> tuple[list[int], list[int]]:
        """The network's output segments: the code's own, except for a method whose network
        outputs something else than the code (the classifier oracle's class scores)."""
        return sizes, levels

    # -- fit ----------------------------------------------------------------------------------

    def fit(
        self,
        X: np.ndarray,
        pairs: Any = None,
        *,
        resume: str = "never",
        progress: Callable[[int, str], Any] | None = None,
        on_epoch: Callable[[dict[str, float]], None] | None = None,
    ) -> DeepHasher:
        """Train on uint8 images X (N, H, W[, C]) with pairs.ancestors (N, K), or (N, K, M)
        ancestor sets for multi-label items, and pairs.weights (u_k, Eq. 2).

        resume (checkpoint.RESUME_MODES): "never" trains afresh; "always" continues the
        checkpoint in work_dir and fails, naming the difference, if it was made with other
        parameters or data; "auto" continues it when it matches and trains afresh otherwise.
        on_epoch(entry) gets each epoch's history entry (loss, e1, e2, flip_fraction,
        bit_balance, ...), e.g. for MLflow.
        """
        checkpoint.check_resume_mode(resume, self.name)
        if resume == "always" and self.work_dir is None:
            raise ValueError(f"{self.name}: resume='always' needs work_dir (the checkpoint)")
        self.check_fit(X, pairs)
        images = check_images(self.name, X)
        anc = np.asarray(pairs.ancestors)
        u = [float(w) for w in pairs.weights]
        K = int(anc.shape[1])
        sizes, levels = self.code_layout(K)
        # The code's layout is known before training: the validation score encodes with it.
        self.K_ = np.int64(K)
        self.segment_sizes_ = np.asarray(sizes, dtype=np.int64)
        self.segment_levels_ = np.asarray(levels, dtype=np.int64)
        self.layer_weights_ = np.asarray(u, dtype=np.float64)
        self.image_shape_ = np.asarray(images.shape[1:], dtype=np.int64)
        try:
            if self.supervision == "label":  # "same finest label" needs each item's finest label
                check_labelled(torch.as_tensor(anc), "ancestors", self.name)
            self._prepare(anc)
            task = Task(tuple(sizes), tuple(levels), tuple(u), anc, self.seed)
            objective = self.objective(self.settings, task)
            net_sizes, net_levels = self._net_layout(sizes, levels)
            config = dataclasses.replace(self.train_config(), n_bits=sum(net_sizes))
            training.check_weights(config, images)
            with self._work_dir() as work_dir:
                result = training.train(
                    config,
                    images,
                    anc,
                    np.arange(len(images)),
                    work_dir,
                    segment_sizes=net_sizes,
                    segment_levels=net_levels,
                    layer_weights=u,
                    objective=objective,
                    resume=self._resume_decision(work_dir, images, pairs, resume),
                    progress=progress,
                    on_epoch=on_epoch,
                    code=self.code_fingerprint(),
                    validate=_validator(self, images, anc) if config.val_size else None,
                )
        except BaseException:
            for name in self._state_fields():  # a failed fit leaves no state
                vars(self).pop(name, None)
            raise
        self.model_ = result.model.eval()
        self.history_ = result.history
        self.pretrained_sha256_ = result.pretrained_sha256
        return self

    def _prepare(self, anc: np.ndarray) -> None:
        """What a method takes from the training items' labels before the loop runs: checks
        made once over them rather than per batch (reading a tensor's values is a host sync),
        state that encoding needs (the oracle's class codes)."""

    @contextlib.contextmanager
    def _work_dir(self) -> Iterator[Path]:
        if self.work_dir is not None:
            yield Path(self.work_dir)
            return
        with tempfile.TemporaryDirectory(prefix=f"shdh-{self.name}-") as tmp:
            yield Path(tmp)

    def _resume_decision(self, work_dir: Path, images: np.ndarray, pairs: Any, resume: str) -> str:
        """Whether the checkpoint in work_dir may be continued ("never" when it may not); a run
        that starts afresh records itself in work_dir/hasher.json."""
        work_dir.mkdir(parents=True, exist_ok=True)
        run_path, ckpt_path = work_dir / RUN_FILE, work_dir / checkpoint.CHECKPOINT_NAME
        record = run_record(self, images, pairs)
        if resume != "never":
            problem = record_problem(run_path, record)
            if problem is not None and resume == "always":
                raise ValueError(f"{run_path}: cannot resume: {problem}")
            if problem is not None:
                if ckpt_path.exists():
                    log.warning("%s: not resuming (%s); training from scratch", run_path, problem)
                resume = "never"
        if resume == "never":
            ckpt_path.unlink(missing_ok=True)  # never pair a stale checkpoint with a new record
            atomic_write_text(run_path, json.dumps(record, indent=2) + "\n")
        return resume

    def code_fingerprint(self) -> dict[str, str]:
        """The digests of the code that decides this hasher's numbers: its own module and every
        shdh module it runs (shdh.runtime.source_fingerprint)."""
        return source_fingerprint.fingerprint([type(self).__module__])

    # -- a training already done: this fit's own, or a sibling's -------------------------------

    def resume_problem(self, work_dir: str | Path, X: np.ndarray, pairs: Any) -> str | None:
        """Why fit(resume=...) would not continue the training recorded in work_dir's
        hasher.json on this data (None: it would). Needs only the record, so a caller can judge
        a checkpoint held elsewhere before fetching it."""
        record = run_record(self, check_images(self.name, X), pairs)
        return record_problem(Path(work_dir) / RUN_FILE, record)

    def first_trained_as_here(
        self, work_dirs: Sequence[str | Path], X: np.ndarray, pairs: Any
    ) -> Path | None:
        """The first of work_dirs holding a checkpoint (training_files) made with this hasher's
        parameters (code_only_params and runtime ones aside) on this data: what resume would
        accept. The data is fingerprinted once for all the folders."""
        record = None
        for work_dir in map(Path, work_dirs):
            if not all((work_dir / name).is_file() for name in self.training_files):
                continue
            record = record or run_record(self, check_images(self.name, X), pairs)
            if record_problem(work_dir / RUN_FILE, record) is None:
                return work_dir
        return None

    def start_from_sibling(
        self, work_dir: str | Path, siblings: Sequence[str | Path], X: np.ndarray, pairs: Any
    ) -> Path | None:
        """Copy into work_dir the training of the first of `siblings` (other fits' work folders)
        that this fit would resume, when the training does not depend on the code length
        (code_only_params names n_bits: the classifier oracle). Training again would repeat it
        exactly, at the full cost of a deep fit; resuming the copy continues an unfinished
        sibling to this fit's epochs. A matching checkpoint of work_dir's own comes first, and
        nothing is copied then. Temporary names, then rename. Returns the folder copied from."""
        if "n_bits" not in self.code_only_params:
            return None
        work_dir = Path(work_dir)
        found = self.first_trained_as_here([work_dir, *siblings], X, pairs)
        if found is None or found == work_dir:
            return None
        for name in self.training_files:
            with atomic_path(work_dir / name) as tmp:
                shutil.copyfile(found / name, tmp)
        log.info(
            "%s: starting from the training in %s (the code length does not change it)",
            work_dir,
            found,
        )
        return found

    def network_record(self) -> dict[str, Any]:
        """What the fit record and the MLflow run say of the network: the backbone and the
        pretrained weights it started from, by their SHA-256 (None: from scratch)."""
        return {
            "backbone": self.loop.backbone,
            "pretrained": self.loop.pretrained,
            "pretrained_sha256": getattr(self, "pretrained_sha256_", None),
        }

    # -- save and load (Hasher's files, the network's weights among the arrays) ----------------

    def _state_fields(self) -> tuple[str, ...]:
        return STATE_FIELDS

    def state(self) -> dict[str, np.ndarray]:
        self._check_fitted()
        arrays = {name: np.asarray(getattr(self, name)) for name in self._state_fields()}
        for key, tensor in self.model_.state_dict().items():
            arrays[NET_PREFIX + key] = tensor.detach().cpu().numpy()
        return arrays

    def save(self, directory: str | Path) -> Path:
        """Write params.json + state.npz; refuses to swap out the directory holding work_dir."""
        if self.work_dir is not None:
            target, work = Path(directory).resolve(), Path(self.work_dir).resolve()
            if work == target or target in work.parents:
                raise ValueError(
                    f"{self.name}: save({directory}) would replace work_dir {self.work_dir} "
                    "(its checkpoint); save the model elsewhere"
                )
        return super().save(directory)

    def _after_load(self) -> None:
        """Rebuild the network from the loaded arrays; refuse state from another setting."""
        net = {}
        for key in [k for k in vars(self) if k.startswith(NET_PREFIX)]:
            net[key[len(NET_PREFIX) :]] = torch.from_numpy(np.array(vars(self).pop(key)))
        missing = [name for name in self._state_fields() if not hasattr(self, name)]
        if missing or not net:
            raise ValueError(f"missing fields {missing or ['net.*']}")
        net_sizes = _net_sizes(self, net)
        shape = [int(s) for s in self.image_shape_]
        in_channels = shape[2] if len(shape) == 3 else 1
        model = checkpoint.build_model_for(
            self.loop, in_channels, net_sizes, head_norm=self.objective.head_norm
        )
        try:
            model.load_state_dict(net, strict=True)
        except RuntimeError as err:
            raise ValueError(
                f"the network weights do not fit {self.name} with backbone="
                f"{self.loop.backbone}, width={self.loop.width}, image_size="
                f"{self.loop.image_size}: {err}"
            ) from err
        self.model_ = model.eval()
        self.history_ = []  # the epoch history lives in the checkpoint, not in the model

    # -- encode ---------------------------------------------------------------------------------

    def _encode(self, X: np.ndarray) -> np.ndarray:
        return inference.encode(  # (N, L) int8 +-1
            self.model_,
            self._encode_input(X),
            device=self.loop.device,
            num_threads=self.loop.num_threads,
        )

    def _encode_input(self, X: Any) -> np.ndarray:
        """Images checked against the training shape: a network takes any size its pooling
        allows, so a wrong one would give codes silently, not an error."""
        images = check_images(self.name, X)
        if tuple(images.shape[1:]) != tuple(int(s) for s in self.image_shape_):
            raise ValueError(
                f"{self.name}: images have shape {tuple(images.shape[1:])} per item but the "
                f"model was trained on {tuple(int(s) for s in self.image_shape_)}"
            )
        return images


def level_segment_sizes(hasher: DeepHasher) -> list[int]:
    """The segments of a method whose code has one per tree level (SHDH, the oracle): they follow
    the tree it was fitted on."""
    hasher._check_fitted()
    return [int(s) for s in hasher.segment_sizes_]


def level_segment_weights(hasher: DeepHasher) -> list[float]:
    """u_k (Eq. 2) of each segment's level: the weights of the weighted Hamming distance (Eq. 4)
    for a method whose code has one segment per tree level (SHDH, the oracle)."""
    hasher._check_fitted()
    return [float(hasher.layer_weights_[k - 1]) for k in hasher.segment_levels_]


def _net_sizes(hasher: DeepHasher, net: dict[str, torch.Tensor]) -> list[int]:
    """The network's output segments for the loaded layout, once the layout is the method's
    own for this bit length and the weights' head has as many rows."""
    K = int(hasher.K_)
    sizes = [int(s) for s in hasher.segment_sizes_]
    levels = [int(k) for k in hasher.segment_levels_]
    if sum(sizes) != hasher.n_bits:
        raise ValueError(
            f"field 'segment_sizes_' {sizes} holds {sum(sizes)} bits but params.json has "
            f"n_bits={hasher.n_bits}: the state belongs to another bit length"
        )
    if (sizes, levels) != hasher.code_layout(K):
        raise ValueError(
            f"fields 'segment_sizes_'/'segment_levels_' {sizes}/{levels} do not match "
            f"{hasher.name}'s layout {hasher.code_layout(K)} for K={K}"
        )
    net_sizes, _ = hasher._net_layout(sizes, levels)
    head = net.get("head.weight")
    if head is None or head.shape[0] != sum(net_sizes):
        rows = None if head is None else head.shape[0]
        raise ValueError(
            f"field 'net.head.weight' has {rows} output rows, {hasher.name} with "
            f"n_bits={hasher.n_bits} has {sum(net_sizes)}"
        )
    return net_sizes


def _validator(hasher: DeepHasher, images: np.ndarray, anc: np.ndarray):
    """The validation score of shdh.training.convergence: the held-out items ranked against the
    validation database with this method's own codes and distance (weighted Hamming for
    SHDH, plain for DPSH, class-path codes for the oracle), database-ideal NDCG@100 with
    the evaluation's own gain (shdh.core.metrics), so that it is the table's metric."""

    def score(model: torch.nn.Module, queries: np.ndarray, database: np.ndarray) -> float:
        hasher.model_ = model
        try:
            q, db = hasher.encode(images[queries]), hasher.encode(images[database])
        finally:
            del hasher.model_
        scores, _ = evaluate(
            pack_codes(q),
            pack_codes(db),
            anc[queries],
            anc[database],
            hasher.segment_sizes(),
            hasher.segment_weights(),
            n=VAL_DEPTH,
            wr_ns=(VAL_DEPTH,),
            curve_max=VAL_DEPTH,
            radius_queries=1,
        )
        return scores[f"ndcg@{VAL_DEPTH}"]

    return score
