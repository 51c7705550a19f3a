"""What the compiled pipeline gives its steps for DVC-versioned data and stored checkpoints: the
download step the checkout's data version, every step the checkpoint store's URL by name."""

from __future__ import annotations

import json

from shdh.steps.dvc_pull import data_version
from shdh.tracking.checkpoint_sync import STORE_ENV
from tests.conftest import REPO
from tests.pipelines.test_compile import compile_with


def test_the_download_step_gets_the_checkouts_data_version(tmp_path, monkeypatch):
    spec, platform, _ = compile_with(tmp_path, monkeypatch, "--profile", "smoke")
    argument = spec["root"]["dag"]["tasks"]["prepare"]["inputs"]["parameters"]["data_version"]
    version = json.loads(argument["runtimeValue"]["constant"])
    assert version == json.loads(data_version(REPO))
    assert version["dvc_file"] == (REPO / "data.dvc").read_text()
    # The checkpoint store's URL comes from shdh-config, by name, like the other settings.
    config = platform["executors"]["exec-train"]["configMapAsEnv"]
    keys = {
        (c["configMapName"], k["configMapKey"], k["envVar"]) for c in config for k in c["keyToEnv"]
    }
    assert ("shdh-config", STORE_ENV, STORE_ENV) in keys


def test_a_local_build_downloads_instead_of_pulling():
    """kfp.local runs have no cluster store to pull from: the step gets no data version."""
    from shdh.kfp import pipelines
    from shdh.kubeflow import resolve_params

    params = resolve_params(REPO / "params.yaml", "smoke", profiles_dir=REPO / "profiles")
    pipeline = pipelines.build_pipeline(params, settings=None)
    task = pipeline.pipeline_spec.root.dag.tasks["prepare"]
    assert task.inputs.parameters["data_version"].runtime_value.constant.string_value == ""
