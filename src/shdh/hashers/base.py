"""The one contract every hashing method follows, shallow or deep (scikit-learn style).

- Hyper-parameters are keyword-only constructor arguments, stored as attributes of the same name
  and returned by `get_params()`; the constructor does no work.
- `fit(X, pairs=None)` learns and returns self; learned state lives in attributes ending in `_`.
- `encode(X)` returns {-1,+1} int8 codes (N, n_bits) and refuses to run before `fit`.
- `save(dir)` / `load(dir)` round-trip the fitted state without pickle: `params.json` (the
  constructor arguments and the class) plus `state.npz` (every learned array).
- Retrieval geometry: `segment_sizes()` and `segment_weights()`. Baselines rank with plain
  Hamming distance: one segment of weight 1.

Supervised methods receive pair labels as a `PairSimilarity` (shdh.hashers.supervision), built
from the S-matrix artifact; its `mode` ("label" or "hierarchical") is what separates KSH from
KSH+H and COSDISH from COSDISH+H, and nothing else does.
"""

from __future__ import annotations

import dataclasses
import inspect
import json
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from shdh.hashers.method_catalogue import declared
from shdh.runtime.array_files import load_arrays
from shdh.runtime.atomic import atomic_dir
from shdh.runtime.json_files import read_json_object

FORMAT = "shdh-hasher/1"


class NotFittedError(RuntimeError):
    """encode() or save() was called before fit()."""


class HasherFiles:
    """Hasher's files, without pickle: params.json (the constructor arguments and the method)
    and state.npz (every learned array); `load` rebuilds a fitted hasher of the class."""

    def save(self, directory: str | Path) -> Path:
        state = self.state()
        with atomic_dir(directory) as tmp:
            params = {k: _jsonable(v) for k, v in self.get_params().items()}
            meta = {"format": FORMAT, "method": self.name, "params": params}
            (tmp / "params.json").write_text(json.dumps(meta, indent=2) + "\n")
            np.savez(tmp / "state.npz", **state)
        return Path(directory)

    @classmethod
    def load(cls, directory: str | Path) -> Hasher:
        """Rebuild a fitted hasher of this class (any method's: shdh.hashers.load_hasher)."""
        if cls is Hasher:
            raise TypeError(
                "Hasher.load: call it on a method's class, or load any saved hasher with "
                "shdh.hashers.load_hasher"
            )
        directory = Path(directory)
        meta, meta_path = read_meta(directory), directory / "params.json"
        if cls.name != meta.get("method"):
            raise ValueError(f"{meta_path}: holds method '{meta.get('method')}', not '{cls.name}'")
        try:  # a parameter this version does not take, or a value it refuses
            hasher = cls(**cls._saved_params(dict(meta.get("params", {}))))
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{meta_path}: field 'params': {exc}") from exc
        state = load_arrays(directory / "state.npz", "the fitted state", "fit it again")
        for key, value in state.items():
            setattr(hasher, key, value)
        try:  # the state must be the model params.json describes
            hasher._after_load()
        except (KeyError, ValueError) as exc:
            raise ValueError(f"{directory / 'state.npz'}: {exc}; fit it again") from exc
        return hasher

    @classmethod
    def _saved_params(cls, params: dict[str, Any]) -> dict[str, Any]:
        """The constructor arguments a params.json's `params` mean: as written, unless some say
        how a fit ran rather than what it made (a deep method's device)."""
        return params

    def _after_load(self) -> None:
        """Hook for hashers whose state needs rebuilding after load (e.g. a network)."""


class DeclaredName:
    """A class's method name, e.g. "itq", "ksh+h": its declaration's in the catalogue
    (shdh.hashers.method_catalogue), the one place it is written, read when asked, so that a
    class defined before its declaration was registered (a test's toy method) has it too. A
    class no declaration names (a shared base, a test's stand-in) has "" unless it sets its own."""

    def __get__(self, instance: Any, owner: type) -> str:
        found = declared(owner.__module__, owner.__qualname__)
        return found.name if found is not None else ""


class Hasher(HasherFiles):
    """Base class: subclasses set the class attributes and implement `_fit` and `_encode`."""

    name: ClassVar[str] = DeclaredName()  # type: ignore[assignment]
    input_kind: ClassVar[str] = "features"  # "features" (GIST-512 rows) or "images" (uint8)
    supervision: ClassVar[str | None] = None  # None, "label" (same leaf) or "hierarchical"
    # Parameters that shape only the code built after training, not the training itself: a
    # fit made with other values of them is this fit's too (the classifier oracle's n_bits,
    # so its three code lengths share one trained classifier per seed; see shdh.steps.fit).
    code_only_params: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def supports(cls, n_bits: int, **params: Any) -> bool:
        """Whether the method makes codes of n_bits with these hyper-parameters (its settings
        section's), so that a plan can leave out the code lengths it cannot run at (KMH's)."""
        return True

    def __init__(self, *, n_bits: int, seed: int = 0) -> None:
        self.n_bits = n_bits
        self.seed = seed

    # -- the contract -----------------------------------------------------------------------

    def fit(self, X: np.ndarray, pairs: Any = None) -> Hasher:
        """Learn from X (N, d) features or (N, H, W[, C]) images; supervised methods need pairs."""
        self.check_fit(X, pairs)
        self._fit(np.asarray(X) if self.input_kind == "features" else X, pairs)
        return self

    def check_fit(self, X: Any, pairs: Any) -> None:
        """What every method asks of its training data: pair labels of its kind for as many
        items as X holds, and a code length of at least one bit."""
        if self.supervision is not None and pairs is None:
            raise ValueError(f"{self.name}: supervised method needs pair labels (pairs=...)")
        if pairs is not None and self.supervision is not None and pairs.mode != self.supervision:
            raise ValueError(
                f"{self.name}: needs '{self.supervision}' pair labels, got '{pairs.mode}'"
            )
        if pairs is not None and pairs.n_items != len(X):
            raise ValueError(f"{self.name}: pairs cover {pairs.n_items} items but X has {len(X)}")
        if self.n_bits < 1:
            raise ValueError(f"{self.name}: n_bits must be >= 1, got {self.n_bits}")

    def encode(self, X: np.ndarray) -> np.ndarray:
        self._check_fitted()
        codes = self._encode(np.asarray(X) if self.input_kind == "features" else X)
        return np.where(codes > 0, 1, -1).astype(np.int8)  # sgn with sgn(0) = -1

    def segment_sizes(self) -> list[int]:
        return [int(self.n_bits)]

    def segment_weights(self) -> list[float]:
        return [1.0]

    def get_params(self) -> dict[str, Any]:
        names = [
            p.name
            for p in inspect.signature(type(self).__init__).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY
        ]
        return {name: getattr(self, name) for name in names}

    def state(self) -> dict[str, np.ndarray]:
        """The learned arrays: every attribute whose name ends in '_' (and does not start so)."""
        self._check_fitted()
        return {k: np.asarray(v) for k, v in vars(self).items() if k.endswith("_") and k[0] != "_"}

    def is_fitted(self) -> bool:
        return any(k.endswith("_") and k[0] != "_" for k in vars(self))

    # -- for subclasses ------------------------------------------------------------------------

    def _fit(self, X: np.ndarray, pairs: Any) -> None:
        raise NotImplementedError

    def _encode(self, X: np.ndarray) -> np.ndarray:
        raise NotImplementedError

    def _check_fitted(self) -> None:
        if not self.is_fitted():
            raise NotFittedError(f"{self.name}: call fit() before encode() or save()")

    def _rng(self) -> np.random.Generator:
        return np.random.default_rng(self.seed)


def read_meta(directory: str | Path) -> dict[str, Any]:
    """A saved hasher's params.json: its format, its method and its parameters."""
    meta_path = Path(directory) / "params.json"
    meta = read_json_object(meta_path, "the hasher parameters")
    if meta.get("format") != FORMAT:
        raise ValueError(f"{meta_path}: field 'format' is not '{FORMAT}'")
    return meta


def _jsonable(value: Any) -> Any:
    """A parameter as params.json holds it: a settings dataclass (a deep method's `loop` and
    `settings`) as its fields, which the constructor takes back."""
    return dataclasses.asdict(value) if dataclasses.is_dataclass(value) else value
