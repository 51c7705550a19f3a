"""MLflow and the object store: the runs the pipeline logs (runs), where they go (store), the
pipeline's parent run (parent_run), the deep encoders as MLflow models (encoder_model), the Model
Registry (model_registry) and a fit's checkpoints kept in S3 (checkpoint_sync). MLflow is imported
lazily, so a step that tracks nothing does not load it.

May import: core, data, hashers, nets, plan, ranking, runtime, training.
"""

from __future__ import annotations

from typing import Any

# What shdh.tracking (a module before it was this folder) gave the components of pipelines
# compiled then: their code runs in the image as it was compiled (shdh.runtime.moved_modules).
_OLD_MODULE_NAMES = frozenset({"attach_text"})


def __getattr__(name: str) -> Any:
    if name in _OLD_MODULE_NAMES:
        from shdh.tracking import runs

        return getattr(runs, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
