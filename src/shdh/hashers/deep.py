"""The deep hashers, SHDH and DPSH, behind the common Hasher contract.

Both are thin wrappers over `shdh.training.loop` (one epoch loop, one CNN-F backbone, one optimiser,
the same pairs), so the two methods differ in their loss only: SHDH's J (paper Eq. 7, segmented
code, weighted Hamming Eq. 4) or DPSH's pairwise likelihood (one segment, plain Hamming; its
original memory bank of past outputs is a switch, off by default: see DPSH). These classes are
the one place where a method's hyper-parameters become a `TrainConfig` and a loss, so the
pipeline, the tests and a notebook train exactly the same thing. A method takes its settings as
objects: the loop's as one `loop_settings.LoopSettings`, its loss's as one `objective` (a settings
class of shdh.core.objectives), each also given as the mapping a saved params.json holds.

Checkpoints go to `work_dir` (a temporary directory when it is None). `fit(..., resume=...)`
continues a checkpoint there when its record agrees (shdh.hashers.deep_folder). Saved state (no
pickle): the network weights as named arrays beside the code's layout (shdh.hashers.deep_state).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict
from typing import Any, ClassVar

import numpy as np
import torch

from shdh.core.level_weights import segment_levels, segment_sizes
from shdh.core.losses import check_labelled
from shdh.core.metrics import evaluate
from shdh.core.objectives import (
    DEFAULT_DPSH_OBJECTIVE,
    DEFAULT_SHDH_OBJECTIVE,
    DPSHObjective,
    Loss,
    SHDHObjective,
)
from shdh.hashers.base import Hasher
from shdh.hashers.deep_folder import ReusedTraining, TrainingFolder, check_images
from shdh.hashers.deep_state import STATE_FIELDS, SavedNetwork
from shdh.hashers.method_catalogue import DPSHParams, SHDHParams
from shdh.ranking.exact import pack_codes
from shdh.training import checkpoint, inference
from shdh.training import loop as training
from shdh.training.convergence import Validate
from shdh.training.loop_settings import (
    DEFAULT_LOOP,
    RUNTIME_FIELDS,
    LoopSettings,
    TrainConfig,
    settings_of,
)

log = logging.getLogger(__name__)

VAL_DEPTH = 100  # the validation score is NDCG@100, the tables' headline metric


class _DeepArguments:
    """How a deep method takes its settings: the constructor's keywords kept by name, the loop's
    and the objective's settings objects made and checked, and the TrainConfig they mean."""

    @classmethod
    def objective_class(cls) -> type[Any]:
        """The class of the method's `objective` argument (shdh.core.losses): what a mapping given
        for it becomes, and whose fields params.yaml sets one by one
        (shdh.plan.all_methods.method_params). Its default's class, so that the constructor's
        signature is the one place naming it."""
        return type(inspect.signature(cls.__init__).parameters["objective"].default)

    def _keep_arguments(self, arguments: dict[str, Any]) -> None:
        """Store each keyword argument of the constructor under its own name, where get_params()
        (which reads the names off the signature) and save() look for it: n_bits and seed too,
        all that Hasher.__init__ would do. The settings objects are made and checked here, so a
        bad value fails at construction, naming the method."""
        for name, parameter in inspect.signature(type(self).__init__).parameters.items():
            if parameter.kind is inspect.Parameter.KEYWORD_ONLY:
                setattr(self, name, arguments[name])
        try:
            self.loop = LoopSettings.of(self.loop)  # a mapping, from a saved params.json
            self.objective = settings_of(self.objective_class(), self.objective, "objective")
        except (TypeError, ValueError) as err:
            raise ValueError(f"{self.name}: {err}") from err

    @classmethod
    def _saved_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        """The loop's runtime settings (device, threads, compile...) say how the fit ran, not
        what the model is: they load as their defaults, so that a model trained with
        `device: cuda` encodes in a CPU-only evaluate step or search service (device auto).
        A model saved before the loss settings became one `objective` holds them flat
        (alpha, e1, ...; eta; reduction): gathered into `objective`, so that it still loads.
        A key of neither kind is left for the constructor to refuse."""
        loop = params.get("loop")
        if isinstance(loop, dict):
            params = {**params, "loop": {k: v for k, v in loop.items() if k not in RUNTIME_FIELDS}}
        names = [f.name for f in dataclasses.fields(cls.objective_class())]
        if "objective" in params or not any(name in params for name in names):
            return params
        rest = {k: v for k, v in params.items() if k not in names}
        return {**rest, "objective": {k: v for k, v in params.items() if k in names}}

    def train_config(self) -> TrainConfig:
        """The TrainConfig these parameters mean: the loop settings, the code length, the seed
        and what the method adds (_config_fields); checked by TrainConfig itself."""
        try:
            return TrainConfig(
                **asdict(self.loop), n_bits=self.n_bits, seed=self.seed, **self._config_fields()
            )
        except (TypeError, ValueError) as err:
            raise ValueError(f"{self.name}: {err}") from err


class _DeepTraining:
    """fit() of a deep method: the code's layout from the tree, then the training loop in the
    hasher's work_dir with the fit's options (resume, progress, per-epoch callback)."""

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
        ancestor sets for multi-label items, and pairs.weights.

        resume (checkpoint.RESUME_MODES): "never" trains afresh; "always" continues the
        checkpoint in work_dir and fails, naming the difference, if it was made with other
        parameters or data; "auto" continues it when it matches and trains afresh otherwise.
        on_epoch(entry) gets each epoch's history entry (loss, e1, e2, flip_fraction,
        bit_balance, ...), e.g. for MLflow.
        """
        checkpoint.check_resume_mode(resume, self.name)
        if resume == "always" and self.work_dir is None:
            raise ValueError(f"{self.name}: resume='always' needs work_dir (the checkpoint)")
        self._fit_options = {"resume": resume, "progress": progress, "on_epoch": on_epoch}
        try:
            super().fit(X, pairs)
        finally:
            del self._fit_options
        return self

    def _fit(self, X: np.ndarray, pairs: Any) -> None:
        images = check_images(self.name, X)
        anc = np.asarray(pairs.ancestors)
        u = [float(w) for w in pairs.weights]
        K = int(anc.shape[1])
        config = self.train_config()
        sizes, levels = self._layout(K)
        loss_fn = self._loss_fn(sizes, levels, u)
        net_sizes, net_levels = self._net_layout(sizes, levels)
        config = dataclasses.replace(config, n_bits=sum(net_sizes))
        # The code's layout is known before training: the validation score encodes with it.
        self.K_ = np.int64(K)
        self.segment_sizes_ = np.asarray(sizes, dtype=np.int64)
        self.segment_levels_ = np.asarray(levels, dtype=np.int64)
        self.layer_weights_ = np.asarray(u, dtype=np.float64)
        self.image_shape_ = np.asarray(images.shape[1:], dtype=np.int64)
        try:
            self._before_training()
            result = self._train(config, images, pairs, (net_sizes, net_levels), loss_fn)
        except BaseException:
            for name in STATE_FIELDS:  # a failed fit leaves no state
                vars(self).pop(name, None)
            raise
        self.model_ = result.model.eval()
        self.history_ = result.history
        self.pretrained_sha256_ = result.pretrained_sha256


class _TrainingRun:
    """The call of the training loop (shdh.training.loop.train) for one fit: in the hasher's
    work_dir, resumed or not as the checkpoint's record allows, with the fit's options."""

    def _train(
        self,
        config: TrainConfig,
        images: np.ndarray,
        pairs: Any,
        net_layout: tuple[list[int], list[int]],
        loss_fn: Loss,
    ) -> training.TrainResult:
        """The training loop on these images, in work_dir, with the fit's options."""
        opts = self._fit_options
        anc = np.asarray(pairs.ancestors)
        net_sizes, net_levels = net_layout
        training.check_weights(config, images)
        with self._work_dir() as work_dir:
            resume = self._prepare_work_dir(work_dir, images, pairs, opts["resume"])
            return training.train(
                config,
                images,
                anc,
                np.arange(len(images)),
                work_dir,
                segment_sizes=net_sizes,
                segment_levels=net_levels,
                layer_weights=[float(w) for w in pairs.weights],
                loss_fn=loss_fn,
                resume=resume,
                progress=opts["progress"],
                on_epoch=opts["on_epoch"],
                code=self.code_fingerprint(),
                validate=_validator(self, images, anc) if config.val_size else None,
            )


class DeepHasher(
    _DeepArguments,
    _DeepTraining,
    _TrainingRun,
    TrainingFolder,
    ReusedTraining,
    SavedNetwork,
    Hasher,
):
    """What SHDH, DPSH and the oracle share: their settings (_DeepArguments), training
    (_DeepTraining, _TrainingRun), work_dir and resume (TrainingFolder, ReusedTraining),
    save/load (SavedNetwork), and here the hooks each method fills in and encoding."""

    input_kind: ClassVar[str] = "images"

    # -- for subclasses -----------------------------------------------------------------------

    def _config_fields(self) -> dict[str, Any]:
        """The TrainConfig fields this method sets beyond the shared ones."""
        return {"memory_bank": self.memory_bank}

    def _layout(self, K: int) -> tuple[list[int], list[int]]:
        """(segment sizes, their 1-based tree levels) for a tree of height K."""
        raise NotImplementedError

    def _loss_fn(
        self, sizes: Sequence[int], levels: Sequence[int], layer_weights: Sequence[float]
    ) -> Loss:
        """The batch loss for a code of these segments (the tree's level weights u_k)."""
        return self.objective.for_layout(sizes, levels, layer_weights)

    def _before_training(self) -> None:
        """What a method adds to its state once the layout is known, before the loop runs."""

    def _net_layout(self, sizes: list[int], levels: list[int]) -> tuple[list[int], list[int]]:
        """The network's output segments: the code's own, except for a method whose network
        outputs something else than the code (the classifier oracle's class scores)."""
        return sizes, levels

    def network_record(self) -> dict[str, Any]:
        """What the fit record and the MLflow run say of the network: the backbone and the
        pretrained weights it started from, by their SHA-256 (None: from scratch)."""
        return {
            "backbone": self.loop.backbone,
            "pretrained": self.loop.pretrained,
            "pretrained_sha256": getattr(self, "pretrained_sha256_", None),
        }

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


class LevelSegments:
    """One code segment per tree level, ranked by the weighted Hamming distance of Eq. 4."""

    def segment_sizes(self) -> list[int]:
        self._check_fitted()
        return [int(s) for s in self.segment_sizes_]

    def segment_weights(self) -> list[float]:
        """u_k (Eq. 2) of each segment's level: the weights of the weighted Hamming (Eq. 4)."""
        self._check_fitted()
        return [float(self.layer_weights_[k - 1]) for k in self.segment_levels_]


class SHDH(LevelSegments, DeepHasher):
    """Supervised Hierarchical Deep Hashing: segmented code, J = E1 + E2 (paper Eq. 5-7)."""

    supervision: ClassVar[str | None] = "hierarchical"

    def __init__(
        self,
        *,
        n_bits: int,
        seed: int = 0,
        loop: LoopSettings = DEFAULT_LOOP,
        layout: str = SHDHParams.layout,
        objective: SHDHObjective = DEFAULT_SHDH_OBJECTIVE,
        memory_bank: bool = SHDHParams.memory_bank,
        work_dir: str | None = None,
    ) -> None:
        self._keep_arguments(locals())

    def _layout(self, K: int) -> tuple[list[int], list[int]]:
        return segment_sizes(self.n_bits, K, self.layout), segment_levels(K, self.layout)


class DPSH(DeepHasher):
    """Deep Pairwise-Supervised Hashing (Li, Wang & Kang 2016): one segment, plain Hamming.

    Same backbone, loop, optimiser and defaults as SHDH; s_ij = same finest label.

    memory_bank=True pairs every batch with the other training items' past outputs, as the
    original code does. It is off by default because, trained from scratch here, it does not
    train: summed over ~10,000 stale partners the likelihood outweighs eta = 10 by 15-20 times
    and, since untrained outputs share a large common component, drives every output to the
    theta = 0 saddle (Fashion-MNIST, 64 bits, 10,000 items, 3 epochs: NDCG@100 0.28 = random
    codes at lr 0.01, 0.48 at its best lr 1e-4, below the untrained network's 0.54). With the
    in-batch pairs SHDH uses, DPSH trains at the shared defaults.
    """

    supervision: ClassVar[str | None] = "label"

    def __init__(
        self,
        *,
        n_bits: int,
        seed: int = 0,
        loop: LoopSettings = DEFAULT_LOOP,
        objective: DPSHObjective = DEFAULT_DPSH_OBJECTIVE,
        memory_bank: bool = DPSHParams.memory_bank,
        work_dir: str | None = None,
    ) -> None:
        self._keep_arguments(locals())

    def _layout(self, K: int) -> tuple[list[int], list[int]]:
        return [int(self.n_bits)], [int(K)]  # one segment; its "level" is the finest one

    def _fit(self, X: np.ndarray, pairs: Any) -> None:
        check_labelled(torch.as_tensor(np.asarray(pairs.ancestors)), "ancestors")
        super()._fit(X, pairs)


def _validator(hasher: Any, images: np.ndarray, anc: np.ndarray) -> Validate:
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
