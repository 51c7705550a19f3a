"""One fix to kfp that compiling this pipeline needs to be quick.

kfp's PipelineTask._ensure_container_spec_exists, which every resource setter of a task calls
(set_cpu_limit, set_memory_request, set_accelerator_type, ...), names its caller for an error
message with inspect.stack(), on every call: that reads the source file of every frame on the
stack. The pipeline sets several resources on each of its tasks, one task per planned fit, so
compiling the gpu profile took half a minute, nearly all of it there (and the smoke profile 3 s
of its 3.3). The same name comes from the caller's frame alone at no cost; the check and its
error stay kfp's.
"""

from __future__ import annotations

import sys


def name_the_caller_from_its_frame() -> None:
    """Replace the check once; a kfp without it (a later release) is left as it is."""
    from kfp.dsl.pipeline_task import PipelineTask

    current = getattr(PipelineTask, "_ensure_container_spec_exists", None)
    if current is None or getattr(current, "from_frame", False):
        return

    def ensure_container_spec_exists(self: PipelineTask) -> None:
        if self.container_spec is None:
            caller = sys._getframe(1).f_code.co_name
            raise ValueError(
                f"{caller} can only be used on single-step components, not pipelines used as "
                "components, or special components like importers."
            )

    ensure_container_spec_exists.from_frame = True  # type: ignore[attr-defined]
    PipelineTask._ensure_container_spec_exists = ensure_container_spec_exists
