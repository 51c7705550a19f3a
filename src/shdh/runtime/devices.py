"""Which device a run trains on, and why CUDA is not usable when it is not.

A GPU step that silently trains on the CPU wastes the GPU it holds and takes hours instead of
minutes, so an explicit `cuda` fails before any work, with what a user needs to fix it: the
CUDA version PyTorch was built for and the NVIDIA driver installed (a driver older than the
build's CUDA is the usual cause on a cluster node).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import torch

DRIVER_FILE = Path("/proc/driver/nvidia/version")


def nvidia_driver_version(driver_file: Path | None = None) -> str | None:
    """The loaded NVIDIA kernel driver's version, from /proc or nvidia-smi; None without one."""
    try:
        text = (driver_file or DRIVER_FILE).read_text()
        found = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+(?:\.\d+)+)", text)
        if found:
            return found.group(1)
    except OSError:
        pass
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = subprocess.run(
            [smi, "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None


def cuda_report(driver_file: Path | None = None) -> str:
    """One line on the CUDA side of this machine: torch's build, the driver, the devices."""
    build = torch.version.cuda
    driver = nvidia_driver_version(driver_file)
    return (
        f"torch {torch.__version__} "
        f"{'built for CUDA ' + build if build else 'is a CPU-only build'}; "
        f"NVIDIA driver {driver or 'not found'}; "
        f"{torch.cuda.device_count() if build else 0} CUDA device(s) visible"
    )


def resolve_device(name: str) -> torch.device:
    """Turn a config device name into a torch.device: "auto" picks cuda when available, so the
    same params file runs on a laptop and on a GPU node; an explicit "cuda" fails loudly,
    before any work, with the CUDA build and driver versions."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        device = None  # torch's message lists its own device kinds, not this setting's
    if device is None or device.type not in ("cpu", "cuda"):
        raise ValueError(f"device: {name!r} is not 'auto', 'cpu' or 'cuda[:N]'")
    if device.type == "cuda" and not torch.cuda.is_available():
        why = (
            "use a machine with an NVIDIA GPU"
            if nvidia_driver_version() is None
            else "a driver older than the CUDA build cannot run it: use a node with a newer driver"
        )
        raise ValueError(
            f"device: {name!r} was asked for but CUDA is not usable here ({cuda_report()}); "
            f"{why}, or set device: auto or cpu"
        )
    if device.type == "cuda" and device.index is not None:
        if device.index >= torch.cuda.device_count():
            raise ValueError(f"device: {name!r} does not exist ({cuda_report()})")
    return device
