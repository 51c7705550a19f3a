"""The CUDA report a GPU step fails with when it finds no usable GPU."""

from pathlib import Path

import pytest
import torch

from shdh.runtime import devices

PROC_VERSION = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  535.183.01  Release Build  "
    "(dvs-builder@U16-I3-B03-4-3)  Sun May 12 19:26:44 UTC 2024\n"
    "GCC version:  gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)\n"
)


def test_driver_version_is_read_from_proc(tmp_path: Path) -> None:
    proc = tmp_path / "version"
    proc.write_text(PROC_VERSION)
    assert devices.nvidia_driver_version(proc) == "535.183.01"


def test_no_driver_is_none_without_nvidia_smi(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(devices.shutil, "which", lambda name: None)
    assert devices.nvidia_driver_version(tmp_path / "missing") is None


def test_cuda_without_a_usable_gpu_names_build_and_driver(tmp_path: Path, monkeypatch) -> None:
    proc = tmp_path / "version"
    proc.write_text(PROC_VERSION)
    monkeypatch.setattr(devices, "DRIVER_FILE", proc)
    monkeypatch.setattr(devices.torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError) as err:
        devices.resolve_device("cuda")
    message = str(err.value)
    assert "'cuda'" in message and "driver 535.183.01" in message
    assert (torch.version.cuda or "CPU-only") in message and "a newer driver" in message
    assert devices.resolve_device("auto") == torch.device("cpu")  # auto never fails
    # no driver at all: no talk of upgrading one
    monkeypatch.setattr(devices, "DRIVER_FILE", tmp_path / "missing")
    monkeypatch.setattr(devices.shutil, "which", lambda name: None)
    with pytest.raises(ValueError, match="driver not found.*use a machine with an NVIDIA GPU"):
        devices.resolve_device("cuda")


def test_cuda_index_and_unknown_device_types() -> None:
    with pytest.raises(ValueError, match="not 'auto', 'cpu' or 'cuda"):
        devices.resolve_device("mps")
    with pytest.raises(ValueError, match="'gpu please' is not 'auto', 'cpu' or 'cuda"):
        devices.resolve_device("gpu please")
