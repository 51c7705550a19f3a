"""The kfp fix the pipeline package applies (pipelines.kfp_patches): the same check and error as
kfp's own, its caller named from the frame."""

import pytest
from kfp import dsl
from kfp.dsl.pipeline_task import PipelineTask

from shdh.kfp import pipelines  # noqa: F401  (applies the fix)


@dsl.component
def _step() -> None:
    pass


@dsl.pipeline
def _inner() -> None:
    _step()


def test_the_pipeline_package_replaced_the_check():
    assert getattr(PipelineTask._ensure_container_spec_exists, "from_frame", False)


def test_a_resource_on_a_pipeline_used_as_a_component_is_refused_naming_the_setter():
    with pytest.raises(ValueError, match=r"^set_cpu_limit can only be used on single-step"):

        @dsl.pipeline
        def outer() -> None:
            _inner().set_cpu_limit("1")


def test_a_resource_on_a_component_is_still_set():
    @dsl.pipeline
    def outer() -> None:
        task = _step().set_cpu_limit("2")
        assert task.container_spec.resources.cpu_limit == "2"
