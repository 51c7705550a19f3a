"""The deep encoders as MLflow models: a fitted deep hasher logged to its training run as a
pyfunc model that maps uint8 images to packed binary codes, servable (`mlflow models serve`) and
registrable (shdh.tracking.model_registry).

A module of its own, apart from shdh.tracking.mlflow_runs: logging or loading an encoder needs the
hashers (and through them the deep methods' code), which no other tracked step runs, so only the
deep fit step loads it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from shdh.tracking.mlflow_runs import MODEL_URI_TAG

MODEL_ARTIFACT = "encoder"  # the logged model's name inside its run


def encoder_signature(image_shape: tuple[int, ...], n_bits: int) -> Any:
    """uint8 images (N, H, W[, C]) in, packed codes uint8 (N, ceil(L/8)) out."""
    from mlflow.models import ModelSignature
    from mlflow.types.schema import Schema, TensorSpec

    return ModelSignature(
        inputs=Schema([TensorSpec(np.dtype(np.uint8), (-1, *image_shape))]),
        outputs=Schema([TensorSpec(np.dtype(np.uint8), (-1, (n_bits + 7) // 8))]),
    )


def _encoder_requirements() -> list[str]:
    """The encoder's third-party imports, pinned to what trained it (shdh itself must be
    installed where the model is served: the project image, or `pip install` of this repo)."""
    from importlib.metadata import version

    return [f"{name}=={version(name)}" for name in ("numpy", "torch", "tqdm")]


def log_encoder(hasher_dir: str | Path, example: Any) -> str:
    """Log a fitted deep hasher (saved in hasher_dir) to the active run as a pyfunc model that
    maps images to packed codes; returns its model URI (also set as the run's tag
    shdh.model_uri, so the best model of a pipeline run can be found and registered)."""
    import mlflow

    from shdh.hashers import load_hasher

    hasher = load_hasher(hasher_dir)
    example = np.ascontiguousarray(example, dtype=np.uint8)
    info = mlflow.pyfunc.log_model(
        name=MODEL_ARTIFACT,
        python_model=encoder_model_class()(),
        artifacts={"hasher": str(hasher_dir)},
        signature=encoder_signature(tuple(example.shape[1:]), hasher.n_bits),
        input_example=example,
        pip_requirements=_encoder_requirements(),
        metadata={
            "method": hasher.name,
            "n_bits": int(hasher.n_bits),
            "segment_sizes": [int(s) for s in hasher.segment_sizes()],
        },
    )
    mlflow.set_tag(MODEL_URI_TAG, info.model_uri)
    return info.model_uri


def encoder_model_class() -> type:
    """The pyfunc class: a subclass of mlflow.pyfunc.PythonModel, defined on first use so that
    importing shdh.tracking.encoder_model does not import MLflow (seconds). It is published as
    shdh.tracking.encoder_model.EncoderModel, so cloudpickle stores it by reference and a logged
    model loads wherever shdh is installed (models logged before the package had folders name
    shdh.encoder_model.EncoderModel, which resolves to this same class)."""
    if "EncoderModel" in globals():
        return globals()["EncoderModel"]
    import mlflow.pyfunc

    class EncoderModel(mlflow.pyfunc.PythonModel):
        """Images (N, H, W[, C]) uint8 -> packed binary codes (N, ceil(L/8)) uint8."""

        def load_context(self, context):
            from shdh.hashers import load_hasher

            self.hasher = load_hasher(context.artifacts["hasher"])

        # An ndarray hint is one MLflow takes no schema from (the signature is the schema) and
        # no longer warns about, in raw terminal colours, on every register, index and serve.
        def predict(self, context, model_input: np.ndarray, params=None):
            from shdh.ranking.exact import pack_codes

            images = np.asarray(model_input)
            if images.dtype != np.uint8:
                raise ValueError(f"encoder input: expected uint8 images, got {images.dtype}")
            return pack_codes(self.hasher.encode(images))

    EncoderModel.__module__ = __name__
    EncoderModel.__qualname__ = "EncoderModel"
    globals()["EncoderModel"] = EncoderModel
    return EncoderModel


def __getattr__(name: str) -> Any:
    """`shdh.tracking.encoder_model.EncoderModel` (what a logged model's pickle names) defines the
    class."""
    if name == "EncoderModel":
        return encoder_model_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
