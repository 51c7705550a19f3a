"""The CPU limit of a container read from fake cgroup files, as the kubelet writes them."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from shdh.runtime.cpu_quota import THREAD_VARIABLES, available_cpus, cpu_quota, limit_threads
from shdh.runtime.instruction_set import SETTING, pin_cpu
from shdh.steps.score import eval_workers
from tests.conftest import REPO

CORES = len(os.sched_getaffinity(0))


def cgroup_v2(tmp_path, text: str):
    (tmp_path / "cpu.max").write_text(text)
    return tmp_path


def cgroup_v1(tmp_path, quota: str, period: str, folder: str = "cpu,cpuacct"):
    (tmp_path / folder).mkdir()
    (tmp_path / folder / "cpu.cfs_quota_us").write_text(quota + "\n")
    (tmp_path / folder / "cpu.cfs_period_us").write_text(period + "\n")
    return tmp_path


@pytest.mark.parametrize(
    ("text", "quota"),
    [("200000 100000\n", 2.0), ("250000 100000", 2.5), ("50000 100000", 0.5), ("max 100000", None)],
)
def test_cgroup_v2_quota(tmp_path, text, quota):
    assert cpu_quota(cgroup_v2(tmp_path, text)) == quota


@pytest.mark.parametrize("folder", ["cpu", "cpu,cpuacct"])
def test_cgroup_v1_quota(tmp_path, folder):
    assert cpu_quota(cgroup_v1(tmp_path, "150000", "100000", folder)) == 1.5


def test_cgroup_v1_without_a_limit(tmp_path):
    assert cpu_quota(cgroup_v1(tmp_path, "-1", "100000")) is None


@pytest.mark.parametrize("text", ["", "garbage", "100000 0", "-5 100000", "100000"])
def test_unreadable_quota_means_no_limit(tmp_path, text):
    assert cpu_quota(cgroup_v2(tmp_path, text)) is None
    assert available_cpus(tmp_path) == CORES


def test_no_cgroup_files_count_the_usable_cores(tmp_path):
    assert cpu_quota(tmp_path) is None
    assert available_cpus(tmp_path) == CORES


def test_workers_follow_the_limit_rounded_down_and_at_least_one(tmp_path):
    assert available_cpus(cgroup_v2(tmp_path, "100000 100000")) == 1
    assert available_cpus(cgroup_v2(tmp_path, "50000 100000")) == 1  # half a CPU: one thread
    assert available_cpus(cgroup_v2(tmp_path, "190000 100000")) == min(CORES, 1)


def test_a_limit_above_the_cores_gives_the_cores(tmp_path):
    assert available_cpus(cgroup_v2(tmp_path, f"{(CORES + 8) * 100000} 100000")) == CORES


def test_evaluate_workers_null_follows_the_pod_limit(tmp_path, monkeypatch):
    """evaluate.workers: null sizes the ranking threads by the cgroup limit."""
    import shdh.runtime.cpu_quota

    monkeypatch.setattr(shdh.runtime.cpu_quota, "CGROUP_ROOT", cgroup_v2(tmp_path, "100000 100000"))
    assert eval_workers(None) == 1
    assert eval_workers(3) == 3  # an explicit count wins


def test_under_a_limit_every_library_gets_its_thread_count_unless_already_set(tmp_path):
    root = cgroup_v2(tmp_path, "100000 100000")
    environ = {"OMP_NUM_THREADS": "3"}  # set by the user or the pod spec: kept
    assert limit_threads(environ, root) == 1
    assert environ == {name: "1" for name in THREAD_VARIABLES} | {"OMP_NUM_THREADS": "3"}


def test_without_a_limit_no_thread_count_is_set(tmp_path):
    environ: dict[str, str] = {}
    assert limit_threads(environ, tmp_path) is None and environ == {}


@pytest.mark.parametrize("mode", ["avx2", "off"])
def test_the_pin_sets_the_thread_counts_in_either_mode(tmp_path, monkeypatch, mode):
    monkeypatch.setattr("shdh.runtime.cpu_quota.CGROUP_ROOT", cgroup_v2(tmp_path, "100000 100000"))
    environ = {SETTING: mode}
    pin_cpu(environ)
    assert all(environ[name] == "1" for name in THREAD_VARIABLES)


def test_torch_and_numba_start_as_many_threads_as_the_limit_allows(tmp_path):
    """A front door's pin under a 1-CPU limit, in a fresh process: torch and numba size their
    pools by it, not by the cores."""
    root = cgroup_v2(tmp_path, "100000 100000")
    code = (
        "import sys; from pathlib import Path; import shdh.runtime.cpu_quota as c; "
        "c.CGROUP_ROOT = Path(sys.argv[1]); "
        "from shdh.runtime.instruction_set import pin_cpu; pin_cpu(); "
        "import numba, torch; print(torch.get_num_threads(), numba.config.NUMBA_NUM_THREADS)"
    )
    env = {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    done = subprocess.run(
        [sys.executable, "-c", code, str(root)],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["1", "1"]
