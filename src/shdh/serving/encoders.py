"""The image encoder a service answers image queries with: a fitted hasher's folder, or the
registered MLflow model that an alias points to (shdh.tracking.model_registry), behind one small
interface.

A source is the recipe (a folder, or a model name and alias), loaded anew on every reload: an
alias moved to a new registry version is picked up by the next reload. A loaded encoder knows
the image shape it was trained on, so uploads are converted to exactly that shape, and its code
length, which must be the index's.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np


class ImageEncoder(Protocol):
    """uint8 images (B, *image_shape) -> packed codes (B, ceil(n_bits / 8)) uint8."""

    image_shape: tuple[int, ...]
    n_bits: int
    method: str | None  # the method whose encoder it is, when known
    run_id: str | None  # the MLflow run that trained it, when known
    name: str | None  # the registered model and its version (a Milvus collection's name)
    version: str | None

    def encode(self, images: np.ndarray) -> np.ndarray: ...


class EncoderSource(Protocol):
    def load(self) -> ImageEncoder: ...

    def describe(self) -> str: ...

    def index_arguments(self) -> str:
        """The `shdh index` options that encode the database with this encoder."""
        ...


# Each encoder encodes one batch at a time (its lock): a network's forward pass already uses
# every core, and the hashers do not promise to be safe to call from several threads at once.


class HasherEncoder:
    def __init__(self, hasher: Any, where: str, run_id: str | None = None) -> None:
        self._lock = threading.Lock()
        if hasher.input_kind != "images":
            raise ValueError(
                f"{where}: method {hasher.name} encodes GIST features, not images; image "
                "queries need a deep method's encoder"
            )
        self.hasher = hasher
        self.image_shape = tuple(int(s) for s in hasher.image_shape_)
        self.n_bits = int(hasher.n_bits)
        self.method = hasher.name
        self.run_id = run_id
        self.name = self.version = None  # no registry

    def encode(self, images: np.ndarray) -> np.ndarray:
        from shdh.ranking.exact import pack_codes

        with self._lock:
            return pack_codes(self.hasher.encode(images))


class PyfuncEncoder:
    def __init__(self, model: Any, name: str | None = None, version: str | None = None) -> None:
        self._lock = threading.Lock()
        from shdh.tracking.model_registry import check_loaded

        check_loaded(model)
        meta = model.metadata
        self.model = model
        self.image_shape = tuple(int(s) for s in meta.get_input_schema().inputs[0].shape[1:])
        self.n_bits = int(meta.metadata["n_bits"])
        self.method = meta.metadata.get("method")
        self.run_id = meta.run_id
        self.name, self.version = name, version

    def encode(self, images: np.ndarray) -> np.ndarray:
        with self._lock:
            return np.asarray(self.model.predict(images), dtype=np.uint8)


@dataclass(frozen=True)
class HasherFolder:
    """A fitted hasher saved in a folder (Hasher.save; a fit's model folder)."""

    folder: Path

    def load(self) -> ImageEncoder:
        from shdh.hashers import load_hasher
        from shdh.tracking.mlflow_runs import fitted_hasher

        hasher_dir, run_id = fitted_hasher(self.folder)
        return HasherEncoder(load_hasher(hasher_dir), str(self.folder), run_id)

    def describe(self) -> str:
        return str(self.folder)

    def index_arguments(self) -> str:
        return f"--model-dir {self.folder}"


@dataclass(frozen=True)
class RegisteredModel:
    """The registered encoder `alias` of model `name` points to (models:/NAME@ALIAS)."""

    name: str
    alias: str

    def load(self) -> ImageEncoder:
        """The model the alias points to, with its version (which names its Milvus
        collection); the alias is read again after the load, and a move in between refused."""
        import mlflow

        from shdh.tracking.model_registry import load_by_alias

        model = load_by_alias(self.name, self.alias)
        version = mlflow.MlflowClient().get_model_version_by_alias(self.name, self.alias)
        if version.run_id != model.metadata.run_id:
            raise ValueError(
                f"{self.describe()} moved to version {version.version} while it was loading; "
                "reload again"
            )
        return PyfuncEncoder(model, self.name, str(version.version))

    def describe(self) -> str:
        return f"models:/{self.name}@{self.alias}"

    def index_arguments(self) -> str:
        return f"--name {self.name} --alias {self.alias}"
