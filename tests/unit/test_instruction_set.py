"""The CPU pin (shdh.runtime.instruction_set): every front door sets it before numpy and torch load,
every library reads it, and pinned fits give the same bits on any x86-64 CPU, Intel's or AMD's, with
AVX2 or AVX-512 (the operations they are made of: tests/unit/test_cpu_vendors.py)."""

from __future__ import annotations

import ast
import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from shdh.runtime import instruction_set
from shdh.runtime.instruction_set import AVX2_PIN, SETTING, host_isa, pin_cpu, pin_mode
from tests.conftest import REPO
from tests.suite_threads import ONE_THREAD

# What tests/unit/pinned_fits.py gave under the pin on each vendor's CPU: equal, as they must be.
_FITS = {
    "cosdish": "2031da4f3e5472aa",
    "dpsh": "f110830889fa7f57",
    "gist": "7d5507365f51616a",
    "itq": "f8a5136cb97ed0ee",
    "kmh": "4843aceae6e8e34f",
    "ksh": "4da1060fb25d2cfe",
    "lfh": "bfd56e852eac1cef",
    "shdh": "dbc14d4284239db6",
}
PINNED_FITS = {
    "AMD EPYC (family 25, AVX-512, 2 cores), 2026-11-28": dict(_FITS),
    # the CPU probe's --fits under this pin on that machine (../shared/cpu-probe)
    "Intel Xeon @ 2.50GHz (AVX-512, 2 cores), 2026-11-28": dict(_FITS),
}
RECORDED_THREADS = {name: "2" for name in ONE_THREAD}
# The caps an AVX-512 machine's libraries would take unpinned, given explicitly.
AVX512_CAPS = {
    "ATEN_CPU_CAPABILITY": "avx512",
    "ONEDNN_MAX_CPU_ISA": "AVX512_CORE_AMX",
    "MKL_ENABLE_INSTRUCTIONS": "AVX512",
    "MKL_CBWR": "AUTO",
    "OPENBLAS_CORETYPE": "SkylakeX",
    "NPY_DISABLE_CPU_FEATURES": "",
}


@pytest.fixture(autouse=True)
def no_cpu_limit(tmp_path_factory, monkeypatch) -> None:
    """No cgroup CPU limit, whatever the machine running the tests has: the pin then sets only
    its own variables (the thread counts under a limit: tests/unit/test_cpu_quota.py)."""
    monkeypatch.setattr("shdh.runtime.cpu_quota.CGROUP_ROOT", tmp_path_factory.mktemp("no-cgroup"))


def unpinned_env(**extra: str) -> dict[str, str]:
    """This process's environment less the pin (the suite runs pinned), plus `extra`."""
    env = {k: v for k, v in os.environ.items() if k not in AVX2_PIN and k != SETTING}
    return {**env, **extra}


def test_pin_sets_every_variable_and_records_the_mode() -> None:
    environ = {"ONEDNN_MAX_CPU_ISA": "AVX512_CORE"}  # a cap set before is overridden
    assert pin_cpu(environ) == "avx2"
    assert {k: environ[k] for k in AVX2_PIN} == AVX2_PIN and environ[SETTING] == "avx2"
    assert pin_mode(environ) == "avx2"
    environ["OPENBLAS_CORETYPE"] = "SkylakeX"  # one variable changed since: not pinned
    assert pin_mode(environ) == "unpinned"
    assert pin_mode({}) == "unpinned"


def test_off_lifts_the_pin_and_a_bad_mode_is_named() -> None:
    environ = {SETTING: " OFF ", "OPENBLAS_CORETYPE": "Zen"}
    assert pin_cpu(environ) == "off"
    assert environ == {SETTING: "off", "OPENBLAS_CORETYPE": "Zen"}  # nothing else set
    assert pin_mode(environ) == "off"
    with pytest.raises(ValueError, match=r"SHDH_CPU_PIN='avx512': must be one of avx2, off"):
        pin_cpu({SETTING: "avx512"})


def test_a_late_pin_says_so(caplog) -> None:
    """numpy is loaded in this process: a pin that changes something now warns."""
    with caplog.at_level(logging.WARNING, logger="shdh.runtime.instruction_set"):
        pin_cpu({})
    assert "came after numpy" in caplog.text and "ATEN_CPU_CAPABILITY" in caplog.text
    caplog.clear()
    pin_cpu(dict(AVX2_PIN))  # already pinned: nothing changes, nothing to say
    assert caplog.text == ""


def test_host_isa_reads_the_cpu_flags(tmp_path: Path) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nflags\t\t: fpu sse2 avx avx2 fma\n")
    assert host_isa(str(cpuinfo)) == "avx2"
    cpuinfo.write_text("flags\t\t: fpu sse2 avx avx2 avx512f avx512bw\n")
    assert host_isa(str(cpuinfo)) == "avx512"
    cpuinfo.write_text("flags\t\t: fpu sse2\n")
    assert host_isa(str(cpuinfo)) == "older"
    assert host_isa(str(tmp_path / "missing")) == "unknown"
    assert instruction_set.describe() == {"cpu_pin": "avx2", "cpu_isa": host_isa()}  # the suite's


LIBRARIES = """
from shdh.runtime.instruction_set import pin_cpu
pin_cpu()
import json, numba.core.config, scipy.linalg, torch
from threadpoolctl import threadpool_info
print(json.dumps({
    "aten": torch.backends.cpu.get_cpu_capability(),
    "numba": [numba.core.config.CPU_NAME, numba.core.config.CPU_FEATURES],
    "openblas": sorted({i.get("architecture") for i in threadpool_info()
                        if i["internal_api"] == "openblas"}),
}))
"""


@pytest.mark.skipif(host_isa() not in ("avx2", "avx512"), reason="needs a CPU with AVX2")
def test_every_library_takes_the_pinned_path() -> None:
    out = subprocess.run(
        [sys.executable, "-c", LIBRARIES],
        env=unpinned_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    seen = json.loads(out.stdout)
    assert seen["aten"] == "AVX2"
    assert seen["numba"] == ["haswell", AVX2_PIN["NUMBA_CPU_FEATURES"]]
    assert seen["openblas"] == ["Haswell"]  # numpy's and scipy's OpenBLAS both


# Installed as sitecustomize in a child process: notes, at numpy's first import, whether the
# pin was already in the environment; the file accumulates over a re-exec.
WATCH = """
import os, sys
class _Watch:
    def find_spec(self, name, path=None, target=None):
        if name == "numpy":
            sys.meta_path.remove(self)
            pinned = os.environ.get("ONEDNN_MAX_CPU_ISA") == "AVX2"
            with open(os.environ["PIN_WATCH"], "a") as f:
                f.write(f"{'pinned' if pinned else 'unpinned'}\\n")
        return None
sys.meta_path.insert(0, _Watch())
"""


def _numpy_imports(tmp_path: Path, command: list[str]) -> list[str]:
    site = tmp_path / "site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(WATCH)
    watch = tmp_path / f"watch-{len(list(tmp_path.glob('watch-*')))}.log"
    env = unpinned_env(PYTHONPATH=str(site), PIN_WATCH=str(watch))
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    return watch.read_text().split() if watch.exists() else []


@pytest.mark.slow
def test_the_front_doors_pin_before_numpy_loads(tmp_path: Path) -> None:
    shdh = str(Path(sys.executable).with_name("shdh"))
    for command in (
        [shdh, "features", "--help"],
        [sys.executable, "-m", "shdh.commands.features", "--help"],
    ):
        assert _numpy_imports(tmp_path, command) == ["pinned"], command
    # python -m shdh.bundle imports numpy with its module, before its main: it starts again,
    # pinned, and only the pinned process runs.
    assert _numpy_imports(tmp_path, [sys.executable, "-m", "shdh.bundle", "train", "--help"]) == [
        "unpinned",
        "pinned",
    ]


def test_every_component_pins_first() -> None:
    """A component's body runs in a fresh process in its container: its first statement after
    the docstring pins, before any import that loads numpy."""
    import inspect

    from shdh.kfp.components.evaluate import evaluate_for

    sources = {path: path.read_text() for path in sorted((REPO / "components").glob("*.py"))}
    # evaluate's component is made per plan (one input per fit) from generated source
    made = evaluate_for(2, gist=True).python_func
    sources["evaluate, made for a plan"] = "@dsl.component()\n" + inspect.getsource(made)
    bodies = 0
    for path, source in sources.items():
        for node in ast.parse(source).body:
            if not isinstance(node, ast.FunctionDef) or not _is_component(node):
                continue
            body = node.body[1:]  # after the docstring
            first, second = ast.unparse(body[0]), ast.unparse(body[1])
            assert first == "from shdh.runtime.instruction_set import pin_cpu", (path, first)
            assert second == "pin_cpu()", (path, second)
            bodies += 1
    assert bodies >= 10


def _is_component(function: ast.FunctionDef) -> bool:
    """Decorated with @dsl.component(...)."""
    return any(
        isinstance(d, ast.Call) and ast.unparse(d.func).endswith("component")
        for d in function.decorator_list
    )


def run_digests(
    module: str, env: dict[str, str], *prefix: str, args: tuple[str, ...] = ()
) -> dict[str, str]:
    """The digests a module of tests/unit prints as JSON, run in a fresh process that its own
    front door pins (as every front door does); `prefix` runs it under another program (an
    emulator), `args` are the module's own."""
    out = subprocess.run(
        [*prefix, sys.executable, "-m", module, *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout)


def _pinned_fits(env: dict[str, str]) -> dict[str, str]:
    """The fits at the recordings' thread counts: both machines had 2 cores, and the libraries
    start a thread per core where the suite runs them at one."""
    return run_digests("tests.unit.pinned_fits", {**env, **RECORDED_THREADS})


def assert_as_recorded(seen: dict[str, str], recorded: dict[str, dict[str, str]]) -> None:
    """`seen` equals every machine's recording; a difference names the machine and the entries."""
    for machine, digests in recorded.items():
        differ = sorted(k for k in digests.keys() | seen.keys() if seen.get(k) != digests.get(k))
        assert not differ, f"this CPU computes {differ} otherwise than the {machine}"


@pytest.mark.slow
def test_pinned_fits_give_both_vendors_bits() -> None:
    assert_as_recorded(_pinned_fits(unpinned_env()), PINNED_FITS)


@pytest.mark.slow
@pytest.mark.skipif(
    host_isa() != "avx512",
    reason=f"this CPU has no AVX-512 ({host_isa()}): there is no wider path for the pin to hold",
)
def test_the_pin_holds_an_avx512_cpu_to_avx2_bits() -> None:
    """The same pinned fits with every library first capped at AVX2 and at AVX-512: equal."""
    avx2_caps = {k: v for k, v in AVX2_PIN.items() if k != "NUMBA_CPU_FEATURES"}
    under_avx2 = _pinned_fits(unpinned_env(**avx2_caps))
    under_avx512 = _pinned_fits(unpinned_env(**AVX512_CAPS))
    assert under_avx2 == under_avx512
    assert_as_recorded(under_avx512, PINNED_FITS)
