"""How many CPUs this process may keep busy: the container's CPU limit where it has one.

`os.cpu_count()` counts the node's cores. In a Kubernetes pod whose CPU limit is 2 on a 64-core
node, 64 ranking threads would share two CPUs' worth of CFS quota and spend most of each period
throttled, so a step that sizes its thread pool by itself reads the limit from the cgroup the
kubelet wrote it into: cgroup v2 `cpu.max` ("QUOTA PERIOD", or "max PERIOD" without a limit),
else cgroup v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us` (-1 without a limit). Outside a
container, or where the files are missing or unreadable, the CPUs this process may run on count.

The maths libraries size their own pools the same wrong way (OpenMP, hence torch, and OpenBLAS,
MKL and numba count the cores the process may run on, which a CPU limit does not narrow), so
`limit_threads` gives each of them the limit through its variable before it loads; the front
doors call it with the CPU pin (shdh.runtime.instruction_set.pin_cpu).
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import MutableMapping
from pathlib import Path

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
_V1_DIRS = ("cpu", "cpu,cpuacct")  # where cgroup v1 mounts the cpu controller


def cpu_quota(root: str | Path | None = None) -> float | None:
    """CPUs allowed by the CFS quota under `root` (default CGROUP_ROOT): 2.5 for "250000
    100000"; None without one."""
    root = Path(root) if root is not None else CGROUP_ROOT
    v2 = root / "cpu.max"
    if v2.is_file():
        return _ratio(v2, *_read(v2).split()[:2])
    for name in _V1_DIRS:
        quota, period = root / name / "cpu.cfs_quota_us", root / name / "cpu.cfs_period_us"
        if quota.is_file() and period.is_file():
            return _ratio(quota, _read(quota), _read(period))
    return None


def available_cpus(root: str | Path | None = None) -> int:
    """Worker threads to start: the CPU limit rounded down (at least 1), never more than the
    CPUs this process may run on."""
    return _threads_under(cpu_quota(root))


def _threads_under(quota: float | None) -> int:
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cores = os.cpu_count() or 1
    if quota is None:
        return max(1, cores)
    return max(1, min(cores, math.floor(quota)))


# The variables the maths libraries size their thread pools by, read when each loads.
THREAD_VARIABLES = (
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "OPENBLAS_NUM_THREADS",
    "NUMBA_NUM_THREADS",
)


def limit_threads(
    environ: MutableMapping[str, str] = os.environ, root: str | Path | None = None
) -> int | None:
    """Under a CPU limit, set each of THREAD_VARIABLES that is not already set to
    available_cpus() and return that count; without a limit change nothing (None). A value set
    by the user or the pod spec wins."""
    quota = cpu_quota(root)
    if quota is None:
        return None
    threads = _threads_under(quota)
    for name in THREAD_VARIABLES:
        environ.setdefault(name, str(threads))
    return threads


def _read(path: Path) -> str:
    try:
        return path.read_text().strip()
    except OSError as exc:
        log.debug("%s: unreadable (%s); no CPU limit assumed", path, exc)
        return ""


def _ratio(path: Path, quota: str = "", period: str = "") -> float | None:
    """quota / period, or None for "max", -1 or text that is not a pair of numbers."""
    if quota in ("max", "-1"):
        return None
    try:
        value = int(quota) / int(period)
    except (ValueError, ZeroDivisionError):
        log.debug(
            "%s: not a CFS quota and period (%r, %r); no CPU limit assumed", path, quota, period
        )
        return None
    return value if value > 0 else None
