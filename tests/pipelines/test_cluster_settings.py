"""The cluster settings the compiler reads (ConfigMap shdh-pipeline): every overlay of k8s/ gives
valid ones, and a bad value is refused in one line naming where it came from and the key."""

from __future__ import annotations

import os
import shutil

import pytest
import yaml

from shdh.kfp.pipelines.cluster_settings import (
    LOOPS,
    STEPS,
    SettingsError,
    overlay_names,
    parse_settings,
    quantity,
    settings_from_file,
    settings_from_overlay,
)
from tests.conftest import REPO
from tests.infra.manifests import render

GPU_OVERLAYS = {"gpu", "profile"}


def config_map(data: dict[str, str], name: str = "shdh-pipeline") -> dict:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def base_data() -> dict[str, str]:
    (cm,) = [
        o
        for o in render("base")
        if (o["kind"], o["metadata"]["name"]) == ("ConfigMap", "shdh-pipeline")
    ]
    return dict(cm["data"])


def test_the_overlays_are_the_five_documented_ones():
    assert overlay_names(REPO / "k8s") == ["dev", "gpu", "kubeflow", "milvus", "profile"]


@pytest.mark.parametrize("name", ["dev", "gpu", "kubeflow", "milvus", "profile"])
def test_every_overlay_gives_complete_valid_settings(name):
    settings = settings_from_overlay(name, REPO / "k8s")
    assert settings.source == f"overlay {name}"
    assert set(settings.resources) == set(STEPS) and set(settings.parallelism) == set(LOOPS)
    for step, sizes in settings.resources.items():
        assert quantity(sizes.cpu_request) <= quantity(sizes.cpu_limit), step
        assert quantity(sizes.memory_request) <= quantity(sizes.memory_limit), step
    assert settings.gpu is (name in GPU_OVERLAYS)
    assert settings.device == ("cuda" if name in GPU_OVERLAYS else "cpu")
    assert settings.retry.retries >= 1 and settings.timeout_seconds > 0


def test_a_users_own_overlay_folder_is_read_too(tmp_path):
    """The documented way to combine: standalone KFP's namespace plus the gpu component."""
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "kustomization.yaml").write_text(
        yaml.safe_dump(
            {
                "apiVersion": "kustomize.config.k8s.io/v1beta1",
                "kind": "Kustomization",
                # kustomize takes relative paths only
                "resources": [os.path.relpath(REPO / "k8s/overlays/kubeflow", folder)],
                "components": [os.path.relpath(REPO / "k8s/components/gpu", folder)],
            }
        )
    )
    settings = settings_from_overlay(str(folder), REPO / "k8s")
    assert settings.gpu and settings.accelerator_type == "nvidia.com/gpu"
    assert (
        settings.resources["evaluate"]
        == settings_from_overlay("kubeflow", REPO / "k8s").resources["evaluate"]
    )


def test_without_kubectl_the_overlay_error_says_what_to_install(monkeypatch):
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(SettingsError, match="needs kubectl on the PATH.*--settings FILE"):
        settings_from_overlay("dev", REPO / "k8s")


@pytest.mark.parametrize(
    ("change", "key", "problem"),
    [
        ({"train.cpu_limit": "lots"}, "train.cpu_limit", "not a positive Kubernetes cpu"),
        ({"default.memory_limit": "2GB"}, "default.memory_limit", "Kubernetes memory"),
        ({"evaluate.cpu_request": "8"}, "evaluate.cpu_request", "above the limit 4"),
        ({"train.retries": "-1"}, "train.retries", "whole number >= 0"),
        ({"train.parallelism": "0"}, "train.parallelism", "whole number >= 1"),
        ({"train.timeout": "6 hours"}, "train.timeout", "a duration such as"),
        ({"train.retry_backoff_factor": "0.5"}, "train.retry_backoff_factor", "number >= 1.0"),
        (
            {"train.retry_backoff_max": "1h"},
            "train.retry_backoff_max",
            "shorter than train.timeout",
        ),
        ({"train.accelerator_type": "nvidia.com/gpu"}, "train.accelerator_limit", "at least 1"),
        ({"train.node_selector": "{pool: a100}"}, "train.node_selector", "not valid JSON"),
        ({"train.node_selector": '{"pool": 1}'}, "train.node_selector", "must be strings"),
        ({"train.tolerations": '[{"key": "a", "x": 1}]'}, "train.tolerations", "keys among"),
        ({"trian.retries": "3"}, "trian.retries", "not a setting"),
        ({"train.timeout": None}, "train.timeout", "missing"),
    ],
)
def test_a_bad_value_is_named_with_its_key(change, key, problem):
    data = base_data()
    for k, v in change.items():
        if v is None:
            del data[k]
        else:
            data[k] = v
    with pytest.raises(SettingsError) as caught:
        parse_settings([config_map(data)], "settings.yaml")
    message = str(caught.value)
    assert message.startswith(f"settings.yaml: ConfigMap shdh-pipeline data.{key}: ")
    assert problem in message and "\n" not in message


def test_a_file_without_the_config_map_is_named(tmp_path):
    path = tmp_path / "other.yaml"
    path.write_text(yaml.safe_dump(config_map(base_data(), name="shdh-config")))
    with pytest.raises(SettingsError, match=f"{path}: expected one ConfigMap named shdh-pipeline"):
        settings_from_file(path)


def test_a_kubectl_list_is_read(tmp_path):
    path = tmp_path / "list.yaml"
    items = [config_map({"a": "b"}, name="shdh-config"), config_map(base_data())]
    path.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "List", "items": items}))
    expected = parse_settings([config_map(base_data())], "base")
    assert settings_from_file(path).resources == expected.resources
