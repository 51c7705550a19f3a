"""Module paths from before the package had folders, still importable.

Two things outside this checkout name shdh's modules by path: a compiled Kubeflow pipeline, whose
component code imports them inside the image (components/, byte for byte as they were compiled),
and an MLflow model, whose pickle names its class (shdh.encoder_model.EncoderModel). Both must
keep working with a newer image, so an old path imports the module that holds that code now, the
same module object under both names. New code imports the new paths; importing an old one warns
(DeprecationWarning), naming the new one.

shdh.training, shdh.tracking and shdh.plan were modules and are folders now; of their old names,
only those compiled pipelines call are kept (shdh.tracking's package answers them).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from types import ModuleType

MOVED: dict[str, str] = {
    "shdh.atomic": "shdh.runtime.atomic",
    "shdh.batches": "shdh.training.batches",
    "shdh.checkpoint": "shdh.training.checkpoint",
    "shdh.checkpoint_store": "shdh.tracking.checkpoint_sync",
    "shdh.checkpoint_writer": "shdh.training.checkpoint_writer",
    "shdh.code_fingerprint": "shdh.runtime.source_fingerprint",
    "shdh.codes": "shdh.core.codes_file",
    "shdh.comparison_view": "shdh.reporting.ui_view",
    "shdh.config": "shdh.settings.profiles",
    "shdh.convergence": "shdh.training.convergence",
    "shdh.cpu_limit": "shdh.runtime.cpu_quota",
    "shdh.cpu_pin": "shdh.runtime.instruction_set",
    "shdh.cuda_graph_step": "shdh.training.cuda_graph_step",
    "shdh.data.dvc_pull": "shdh.steps.dvc_pull",
    "shdh.data.registry": "shdh.data.dataset_catalogue",
    "shdh.devices": "shdh.runtime.devices",
    "shdh.encoder_model": "shdh.tracking.encoder_model",
    "shdh.errors": "shdh.runtime.errors",
    "shdh.figures": "shdh.reporting.figures",
    "shdh.fits": "shdh.plan.fits",
    "shdh.hierarchy": "shdh.core.hierarchy",
    "shdh.image_input": "shdh.core.image_input",
    "shdh.inference": "shdh.training.inference",
    "shdh.inputs": "shdh.steps.input_hashes",
    "shdh.loop": "shdh.training.loop_settings",
    "shdh.loss_log": "shdh.training.loss_log",
    "shdh.losses": "shdh.core.losses",
    "shdh.methods": "shdh.hashers.method_catalogue",
    "shdh.metrics": "shdh.core.metrics",
    "shdh.mlflow_store": "shdh.tracking.store",
    "shdh.paper_results": "shdh.reporting.paper_results",
    "shdh.parent_run": "shdh.tracking.parent_run",
    "shdh.parent_summary": "shdh.reporting.parent_summary",
    "shdh.plan_shallow": "shdh.plan.shallow",
    "shdh.probe_codes": "shdh.training.probe_codes",
    "shdh.progress": "shdh.runtime.progress",
    "shdh.registry": "shdh.tracking.model_registry",
    "shdh.report": "shdh.reporting.report",
    "shdh.retrieval": "shdh.ranking.exact",
    "shdh.retrieval_kernel": "shdh.ranking.exact_kernel",
    "shdh.search": "shdh.ranking.search_index",
    "shdh.search_kernel": "shdh.ranking.service_kernel",
    "shdh.search_rank": "shdh.ranking.service_ranker",
    "shdh.similarity": "shdh.core.similarity",
    "shdh.training_state": "shdh.training.state",
    "shdh.training_step": "shdh.training.step",
}


class MovedModuleFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path of MOVED and loads it as the module at its new path."""

    def find_spec(self, fullname, path=None, target=None):
        if fullname not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec) -> ModuleType:
        new = MOVED[spec.name]
        warnings.warn(
            f"{spec.name} is {new} now; import it from there",
            DeprecationWarning,
            stacklevel=2,
        )
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """The module ran when it was imported under its own name."""


def install() -> None:
    """Register the finder once per process (after the normal ones: a real module wins)."""
    if not any(isinstance(finder, MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(MovedModuleFinder())
