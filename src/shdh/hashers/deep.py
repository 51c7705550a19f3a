"""The deep hashers, SHDH and DPSH, behind the common Hasher contract.

Both are thin wrappers over `shdh.training` (one epoch loop, one CNN-F backbone, one optimiser,
the same pairs), so the two methods differ in their loss only: SHDH's J (paper Eq. 7, segmented
code, weighted Hamming Eq. 4) or DPSH's pairwise likelihood (one segment, plain Hamming; its
original memory bank of past outputs is a switch, off by default: see DPSH). These classes are
the one place where a method's hyper-parameters become a `TrainConfig` and a loss, so the
pipeline, the tests and a notebook train exactly the same thing. A method takes its settings as
objects: the loop's as one `loop.LoopSettings`, its loss's as one `objective` (a settings
class of shdh.losses), each also given as the mapping a saved params.json holds.

Checkpoints go to `work_dir` (a temporary directory when it is None). `fit(..., resume=...)`
continues a checkpoint there. The training loop's own check covers the TrainConfig, the layout
and the training indices, but not what the wrapper adds (DPSH's eta) nor the pixels and labels,
so the wrapper writes `work_dir/hasher.json` (the method, its parameters and a fingerprint of the
data) and resumes only when that agrees.

Saved state (no pickle): the network weights as named arrays "net.<parameter name>" plus K, the
segment sizes and levels, the layer weights u and the training image shape.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import inspect
import json
import logging
import shutil
import tempfile
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import torch

from shdh import code_fingerprint, training
from shdh.atomic import atomic_path, atomic_write_text
from shdh.hashers.base import Hasher
from shdh.hierarchy import segment_levels, segment_sizes
from shdh.loop import DEFAULT_LOOP, RUNTIME_FIELDS, LoopSettings, settings_of
from shdh.losses import (
    DEFAULT_DPSH_OBJECTIVE,
    DEFAULT_SHDH_OBJECTIVE,
    DPSHObjective,
    Loss,
    SHDHObjective,
    check_labelled,
    flat_objective,
)
from shdh.metrics import evaluate
from shdh.nets.hashing import build_model
from shdh.retrieval import pack_codes

log = logging.getLogger(__name__)

NET_PREFIX = "net."  # state.npz keys of the network weights
RUN_FILE = "hasher.json"  # in work_dir: what the checkpoint there was trained with
# Parameters that do not change what is computed, so a resumed run may differ in them (the
# training loop lets `epochs` grow, to extend a finished run).
_RUNTIME_PARAMS = ("epochs", *RUNTIME_FIELDS, "work_dir")
_STATE_FIELDS = ("K_", "segment_sizes_", "segment_levels_", "layer_weights_", "image_shape_")
VAL_DEPTH = 100  # the validation score is NDCG@100, the tables' headline metric


class _DeepHasher(Hasher):
    """What SHDH and DPSH share: training through shdh.training, encoding, save/load."""

    input_kind: ClassVar[str] = "images"

    @classmethod
    def objective_class(cls) -> type[Any]:
        """The class of the method's `objective` argument (shdh.losses): what a mapping given
        for it becomes, and whose fields params.yaml sets one by one (shdh.plan.method_params).
        Its default's class, so that the constructor's signature is the one place naming it."""
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
        """A model saved before the loss settings became one `objective` holds them flat
        (alpha, e1, ...; eta; reduction): gathered into `objective`, so that it still loads.
        A key of neither kind is left for the constructor to refuse."""
        names = [f.name for f in dataclasses.fields(cls.objective_class())]
        if "objective" in params or not any(name in params for name in names):
            return params
        rest = {k: v for k, v in params.items() if k not in names}
        return {**rest, "objective": {k: v for k, v in params.items() if k in names}}

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

    # -- parameters -> TrainConfig ------------------------------------------------------------

    def train_config(self) -> training.TrainConfig:
        """The TrainConfig these parameters mean: the loop settings, the code length, the seed
        and what the method adds (_config_fields); checked by TrainConfig itself."""
        try:
            return training.TrainConfig(
                **asdict(self.loop), n_bits=self.n_bits, seed=self.seed, **self._config_fields()
            )
        except (TypeError, ValueError) as err:
            raise ValueError(f"{self.name}: {err}") from err

    # -- fit / encode -------------------------------------------------------------------------

    def fit(
        self,
        X: np.ndarray,
        pairs: Any = None,
        *,
        resume: str = "never",
        progress: Callable[[int, str], Any] | None = None,
        on_epoch: Callable[[dict[str, float]], None] | None = None,
    ) -> _DeepHasher:
        """Train on uint8 images X (N, H, W[, C]) with pairs.ancestors (N, K), or (N, K, M)
        ancestor sets for multi-label items, and pairs.weights.

        resume (training.RESUME_MODES): "never" trains afresh; "always" continues the
        checkpoint in work_dir and fails, naming the difference, if it was made with other
        parameters or data; "auto" continues it when it matches and trains afresh otherwise.
        on_epoch(entry) gets each epoch's history entry (loss, e1, e2, flip_fraction,
        bit_balance, ...), e.g. for MLflow.
        """
        training.check_resume_mode(resume, self.name)
        if resume == "always" and self.work_dir is None:
            raise ValueError(f"{self.name}: resume='always' needs work_dir (the checkpoint)")
        self._fit_options = {"resume": resume, "progress": progress, "on_epoch": on_epoch}
        try:
            super().fit(X, pairs)
        finally:
            del self._fit_options
        return self

    def _fit(self, X: np.ndarray, pairs: Any) -> None:
        images = _check_images(self.name, X)
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
            for name in _STATE_FIELDS:  # a failed fit leaves no state
                vars(self).pop(name, None)
            raise
        self.model_ = result.model.eval()
        self.history_ = result.history

    def _train(
        self,
        config: training.TrainConfig,
        images: np.ndarray,
        pairs: Any,
        net_layout: tuple[list[int], list[int]],
        loss_fn: Loss,
    ) -> training.TrainResult:
        """The training loop on these images, in work_dir, with the fit's options."""
        opts = self._fit_options
        anc = np.asarray(pairs.ancestors)
        net_sizes, net_levels = net_layout
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
                validate=self._validator(images, anc) if config.val_size else None,
            )

    def _validator(self, images: np.ndarray, anc: np.ndarray) -> training.Validate:
        """The validation score of shdh.convergence: the held-out items ranked against the
        validation database with this method's own codes and distance (weighted Hamming for
        SHDH, plain for DPSH, class-path codes for the oracle), database-ideal NDCG@100 with
        the evaluation's own gain (shdh.metrics), so that it is the table's metric."""

        def score(model: torch.nn.Module, queries: np.ndarray, database: np.ndarray) -> float:
            self.model_ = model
            try:
                q, db = self._encode(images[queries]), self._encode(images[database])
            finally:
                del self.model_
            scores, _ = evaluate(
                pack_codes(np.where(q > 0, 1, -1)),
                pack_codes(np.where(db > 0, 1, -1)),
                anc[queries],
                anc[database],
                self.segment_sizes(),
                self.segment_weights(),
                n=VAL_DEPTH,
                wr_ns=(VAL_DEPTH,),
                curve_max=VAL_DEPTH,
                radius_queries=1,
            )
            return scores[f"ndcg@{VAL_DEPTH}"]

        return score

    def _encode(self, X: np.ndarray) -> np.ndarray:
        return training.encode(  # (N, L) int8 +-1
            self.model_,
            self._encode_input(X),
            device=self.loop.device,
            num_threads=self.loop.num_threads,
        )

    def _encode_input(self, X: Any) -> np.ndarray:
        """Images checked against the training shape: a network takes any size its pooling
        allows, so a wrong one would give codes silently, not an error."""
        images = _check_images(self.name, X)
        if tuple(images.shape[1:]) != tuple(int(s) for s in self.image_shape_):
            raise ValueError(
                f"{self.name}: images have shape {tuple(images.shape[1:])} per item but the "
                f"model was trained on {tuple(int(s) for s in self.image_shape_)}"
            )
        return images

    # -- work_dir and resume ------------------------------------------------------------------

    @contextlib.contextmanager
    def _work_dir(self) -> Iterator[Path]:
        if self.work_dir is not None:
            yield Path(self.work_dir)
            return
        with tempfile.TemporaryDirectory(prefix=f"shdh-{self.name}-") as tmp:
            yield Path(tmp)

    def _run_record(self, images: np.ndarray, pairs: Any) -> dict[str, Any]:
        """What a checkpoint was trained with, as work_dir/hasher.json holds it (JSON-normalised,
        so it compares equal to the file read back). The objective's settings stand by their own
        names (alpha, eta), as in the records written before it became one argument, so that
        those checkpoints still resume."""
        skip = (*_RUNTIME_PARAMS, *self.code_only_params)
        params = {k: v for k, v in flat_objective(self.get_params()).items() if k not in skip}
        params["loop"] = {k: v for k, v in asdict(self.loop).items() if k not in skip}
        record = {
            "method": self.name,
            "params": params,
            "data_sha256": _fingerprint(images, pairs),
            "code": self.code_fingerprint(),
        }
        return json.loads(json.dumps(record))

    def code_fingerprint(self) -> dict[str, str]:
        """The digests of the code that decides this hasher's numbers: its own module and every
        shdh module it runs (shdh.code_fingerprint)."""
        return code_fingerprint.fingerprint([type(self).__module__])

    training_files: ClassVar[tuple[str, ...]] = (training.CHECKPOINT_NAME, RUN_FILE)

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
            record = record or self._run_record(_check_images(self.name, X), pairs)
            if _record_mismatch(work_dir / RUN_FILE, record) is None:
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

    def resume_problem(self, work_dir: str | Path, X: np.ndarray, pairs: Any) -> str | None:
        """Why fit(resume=...) would not continue the training recorded in work_dir's
        hasher.json on this data (None: it would). Needs only the record, so a caller can judge
        a checkpoint held elsewhere before fetching it."""
        record = self._run_record(_check_images(self.name, X), pairs)
        return _record_mismatch(Path(work_dir) / RUN_FILE, record)

    def _prepare_work_dir(self, work_dir: Path, images: np.ndarray, pairs: Any, resume: str) -> str:
        """Decide whether the checkpoint in work_dir may be continued; record this run."""
        work_dir.mkdir(parents=True, exist_ok=True)
        run_path, ckpt_path = work_dir / RUN_FILE, work_dir / training.CHECKPOINT_NAME
        record = self._run_record(images, pairs)
        if resume != "never":
            problem = _record_mismatch(run_path, record)
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

    # -- save / load --------------------------------------------------------------------------

    def _state_fields(self) -> tuple[str, ...]:
        return _STATE_FIELDS

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

    @classmethod
    def load(cls, directory: str | Path) -> Hasher:
        try:
            return super().load(directory)
        except _StateError as err:
            raise ValueError(f"{Path(directory) / 'state.npz'}: {err}") from err

    def _after_load(self) -> None:
        """Rebuild the network from the loaded arrays; refuse state from another setting."""
        net = {}
        for key in [k for k in vars(self) if k.startswith(NET_PREFIX)]:
            net[key[len(NET_PREFIX) :]] = torch.from_numpy(np.array(vars(self).pop(key)))
        missing = [name for name in self._state_fields() if not hasattr(self, name)]
        if missing or not net:
            raise _StateError(f"missing fields {missing or ['net.*']}")
        K = int(self.K_)
        sizes = [int(s) for s in self.segment_sizes_]
        levels = [int(k) for k in self.segment_levels_]
        if sum(sizes) != self.n_bits:
            raise _StateError(
                f"field 'segment_sizes_' {sizes} holds {sum(sizes)} bits but params.json has "
                f"n_bits={self.n_bits}: the state belongs to another bit length"
            )
        if (sizes, levels) != self._layout(K):
            raise _StateError(
                f"fields 'segment_sizes_'/'segment_levels_' {sizes}/{levels} do not match "
                f"{self.name}'s layout {self._layout(K)} for K={K}"
            )
        net_sizes, _ = self._net_layout(sizes, levels)
        head = net.get("head.weight")
        if head is None or head.shape[0] != sum(net_sizes):
            rows = None if head is None else head.shape[0]
            raise _StateError(
                f"field 'net.head.weight' has {rows} output rows, {self.name} with "
                f"n_bits={self.n_bits} has {sum(net_sizes)}"
            )
        shape = [int(s) for s in self.image_shape_]
        model = build_model(
            in_channels=shape[2] if len(shape) == 3 else 1,
            n_bits=sum(net_sizes),
            width=self.loop.width,
            image_size=self.loop.image_size,
            head_init=self.loop.head_init,
            segment_sizes=net_sizes,
        )
        try:
            model.load_state_dict(net, strict=True)
        except RuntimeError as err:
            raise _StateError(
                f"the network weights do not fit {self.name} with width={self.loop.width}, "
                f"image_size={self.loop.image_size}: {err}"
            ) from err
        self.model_ = model.eval()
        self.history_ = []  # the epoch history lives in the checkpoint, not in the model


class LevelSegments:
    """One code segment per tree level, ranked by the weighted Hamming distance of Eq. 4."""

    def segment_sizes(self) -> list[int]:
        self._check_fitted()
        return [int(s) for s in self.segment_sizes_]

    def segment_weights(self) -> list[float]:
        """u_k (Eq. 2) of each segment's level: the weights of the weighted Hamming (Eq. 4)."""
        self._check_fitted()
        return [float(self.layer_weights_[k - 1]) for k in self.segment_levels_]


class SHDH(LevelSegments, _DeepHasher):
    """Supervised Hierarchical Deep Hashing: segmented code, J = E1 + E2 (paper Eq. 5-7)."""

    name: ClassVar[str] = "shdh"
    supervision: ClassVar[str | None] = "hierarchical"

    def __init__(
        self,
        *,
        n_bits: int,
        seed: int = 0,
        loop: LoopSettings = DEFAULT_LOOP,
        layout: str = "levels",
        objective: SHDHObjective = DEFAULT_SHDH_OBJECTIVE,
        memory_bank: bool = False,
        work_dir: str | None = None,
    ) -> None:
        self._keep_arguments(locals())

    def _layout(self, K: int) -> tuple[list[int], list[int]]:
        return segment_sizes(self.n_bits, K, self.layout), segment_levels(K, self.layout)


class DPSH(_DeepHasher):
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

    name: ClassVar[str] = "dpsh"
    supervision: ClassVar[str | None] = "label"

    def __init__(
        self,
        *,
        n_bits: int,
        seed: int = 0,
        loop: LoopSettings = DEFAULT_LOOP,
        objective: DPSHObjective = DEFAULT_DPSH_OBJECTIVE,
        memory_bank: bool = False,
        work_dir: str | None = None,
    ) -> None:
        self._keep_arguments(locals())

    def _layout(self, K: int) -> tuple[list[int], list[int]]:
        return [int(self.n_bits)], [int(K)]  # one segment; its "level" is the finest one

    def _fit(self, X: np.ndarray, pairs: Any) -> None:
        check_labelled(torch.as_tensor(np.asarray(pairs.ancestors)), "ancestors")
        super()._fit(X, pairs)


class _StateError(ValueError):
    """A state.npz that does not belong to this hasher's parameters."""


def _check_images(name: str, X: Any) -> np.ndarray:
    if not isinstance(X, np.ndarray) or X.dtype != np.uint8 or X.ndim not in (3, 4):
        desc = f"{X.dtype} {X.shape}" if isinstance(X, np.ndarray) else type(X).__name__
        raise ValueError(f"{name}: images must be a uint8 (N, H, W[, C]) array, got {desc}")
    if len(X) == 0:
        raise ValueError(f"{name}: images are empty")
    return X


def _fingerprint(images: np.ndarray, pairs: Any) -> str:
    """sha256 of the pixels, the ancestors, u and the pair mode: the data a checkpoint saw."""
    h = hashlib.sha256()
    for arr in (images, np.asarray(pairs.ancestors), np.asarray(pairs.weights, np.float64)):
        h.update(f"{arr.dtype}{arr.shape}".encode())
        h.update(np.ascontiguousarray(arr).data)
    h.update(str(pairs.mode).encode())
    return h.hexdigest()


def _record_mismatch(path: Path, record: dict[str, Any]) -> str | None:
    """Why the run recorded at `path` is not this one (None when it is)."""
    try:
        saved = json.loads(path.read_text())
    except FileNotFoundError:
        return "no record of the run that made the checkpoint"
    except (OSError, ValueError) as err:
        return f"unreadable ({err})"
    if not isinstance(saved, dict):
        return "not a JSON object"
    for key in ("method", "data_sha256"):
        if saved.get(key) != record[key]:
            return f"field '{key}' is {saved.get(key)!r} there but {record[key]!r} now"
    changed = code_fingerprint.differing(saved.get("code"), record["code"])
    if changed:
        return f"made by other code: {', '.join(changed)} changed since"
    saved_params = saved.get("params") if isinstance(saved.get("params"), dict) else {}
    return _params_mismatch(saved_params, record["params"])


def _params_mismatch(saved: dict[str, Any], now: dict[str, Any], prefix: str = "") -> str | None:
    """The first parameter that differs, by its dotted name (loop.lr), so the message points at
    the one setting that changed rather than at a whole settings group."""
    for key, value in now.items():
        there = saved.get(key)
        if isinstance(there, dict) and isinstance(value, dict):
            found = _params_mismatch(there, value, f"{prefix}{key}.")
            if found:
                return found
        elif there != value:
            return f"parameter '{prefix}{key}' is {there!r} there but {value!r} now"
    return None
