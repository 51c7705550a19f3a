"""The same bits on every x86-64 CPU with AVX2, Intel's or AMD's: the maths libraries held to one
code path.

PyTorch, numpy, OpenBLAS, MKL, oneDNN and numba each pick their kernels by the CPU when they
load: by its instruction set, and MKL also by its vendor. An AVX-512 kernel sums in another
order than an AVX2 one, or evaluates exp and log with other approximations, so the same CPU fit
gave other weights, codes and metrics on an AVX-512 machine than on an AVX2 one (up to 0.04
NDCG for the deep rows, the 4th decimal for the shallow ones), while reruns on one machine were
bit-identical. Each library reads a setting that caps or names its code path; this module sets
them all to AVX2 (Haswell), which every machine of this kind has, before any of those libraries
is imported.

The instruction set alone is not enough. Held to AVX2 (MKL_CBWR=AVX2,STRICT), MKL still chose
other kernels on Intel than on AMD for small matrix products (a 64x256 by 256x48 linear layer)
and for the exp and log behind softplus and log1p(exp), so the deep fits parted by vendor: an
Intel Xeon gave other SHDH-32 and SHDH-64 rows than an AMD EPYC. MKL's COMPATIBLE branch
computes alike on both. tests/unit/test_cpu_vendors.py holds the evidence: the digests of each
CPU operation a deep fit is made of and of small pinned fits, equal on an AMD EPYC and an Intel
Xeon, each with AVX-512, and on an Intel Haswell and an AMD EPYC-Rome (AVX2 only) emulated
instruction by instruction by QEMU.

Measured besides: the torch ATen capability and the oneDNN ISA both decide the deep fits' bits
(capping either below AVX2 changes them), and oneDNN's convolutions, batch norm, pooling, the
element-wise functions torch computes itself, sums and the SGD step agree across the vendors
under the pin. The rest are held for the paths they would take on AVX-512: numpy's AVX-512 loops
(exp, log, sorting), OpenBLAS's SkylakeX kernels, numba's host-tuned code.

`SHDH_CPU_PIN=off` lifts the pin for speed (each library then takes its fastest path, and the
numbers belong to that CPU); the default, `avx2`, pins. Runs record the mode they ran in
(MLflow tag shdh.runtime.instruction_set, the fit records' `cpu_pin`). GPU kernels are not pinned:
CUDA fits are not bit-reproducible in any case, and only the CPU side of a GPU run is held.

The pin must come before numpy, torch or numba load: the front doors (the CLI and
`python -m shdh.commands.STEP` through shdh.commands, the Kubeflow components' first line,
`python -m shdh.bundle`, the test suite's conftest) call `pin_cpu()` first. Library users call
it themselves, first thing, or export the variables of `AVX2_PIN`.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import MutableMapping
from importlib import metadata

from shdh.runtime.cpu_quota import limit_threads

log = logging.getLogger(__name__)

SETTING = "SHDH_CPU_PIN"
MODES = ("avx2", "off")
DEFAULT_MODE = "avx2"
# Libraries that read their code-path settings when they load.
_READ_AT_LOAD = ("numpy", "scipy", "torch", "numba")

# numba compiles for the CPU it names and, unless told, for the host's own features: both are
# given, so that an AVX-512 host cannot widen the vectors. These are Haswell's features.
_HASWELL_FEATURES = ",".join(
    f"+{f}"
    for f in (
        "64bit avx avx2 bmi bmi2 cmov cx16 cx8 f16c fma fsgsbase fxsr lzcnt mmx movbe pclmul "
        "popcnt rdrnd sahf sse sse2 sse3 sse4.1 sse4.2 ssse3 xsave xsaveopt"
    ).split()
)


def _numpy_avx512_features() -> str:
    """numpy's names for its AVX-512 dispatch targets: grouped since numpy 2.4."""
    try:
        major, minor = (int(p) for p in metadata.version("numpy").split(".")[:2])
    except (metadata.PackageNotFoundError, ValueError):
        major, minor = 2, 4
    if (major, minor) >= (2, 4):
        return "X86_V4 AVX512_ICL AVX512_SPR"
    return "AVX512F AVX512CD AVX512_KNL AVX512_KNM AVX512_SKX AVX512_CLX AVX512_CNL AVX512_ICL"


AVX2_PIN: dict[str, str] = {
    "ATEN_CPU_CAPABILITY": "avx2",  # torch's own vectorised kernels (sums, exp, tanh, ...)
    "ONEDNN_MAX_CPU_ISA": "AVX2",  # torch's convolutions and linear layers
    "MKL_ENABLE_INSTRUCTIONS": "AVX2",  # torch's BLAS and LAPACK
    # MKL's branch that computes alike on Intel and AMD: on its AVX2 branch MKL took other
    # small-matrix and exp/log kernels on each vendor's CPUs (the deep fits parted).
    "MKL_CBWR": "COMPATIBLE",
    "OPENBLAS_CORETYPE": "Haswell",  # numpy's and scipy's BLAS and LAPACK
    "NPY_DISABLE_CPU_FEATURES": _numpy_avx512_features(),  # numpy's SIMD loops
    "NUMBA_CPU_NAME": "haswell",  # the retrieval kernel
    "NUMBA_CPU_FEATURES": _HASWELL_FEATURES,
}


def requested_mode(environ: MutableMapping[str, str] = os.environ) -> str:
    """The mode SHDH_CPU_PIN asks for (unset: the default); a clear error for another value."""
    raw = environ.get(SETTING, "")
    mode = raw.strip().lower() or DEFAULT_MODE
    if mode not in MODES:
        raise ValueError(
            f"environment variable {SETTING}={raw!r}: must be one of {', '.join(MODES)} "
            f"({DEFAULT_MODE}: the same bits on every x86-64 CPU with AVX2; off: the fastest "
            "kernels of this CPU)"
        )
    return mode


def pin_cpu(environ: MutableMapping[str, str] = os.environ, *, reexec: bool = False) -> str:
    """Apply the mode SHDH_CPU_PIN asks for to the environment; returns it.

    `avx2` sets AVX2_PIN (and SHDH_CPU_PIN itself, so child processes inherit the mode);
    `off` leaves the variables as they are. Either way, under a container's CPU limit the
    libraries' thread counts are set to it (shdh.runtime.cpu_quota.limit_threads).

    Called after a library that reads them has loaded, the pin would come too late for it:
    with reexec (for a `__main__` that had to import them first) the process starts again, as it
    was started, with the pinned environment; without, it logs a warning that this run's numbers
    may not be reproducible elsewhere.
    """
    mode = requested_mode(environ)
    environ[SETTING] = mode
    limit_threads(environ)  # a pin or not, no library should start more threads than it may run
    if mode == "off":
        return mode
    changed = sorted(k for k, v in AVX2_PIN.items() if environ.get(k) != v)
    environ.update(AVX2_PIN)
    loaded = [name for name in _READ_AT_LOAD if name in sys.modules]
    if changed and loaded:
        if reexec and environ is os.environ:
            os.execv(sys.executable, sys.orig_argv)
        log.warning(
            "the CPU pin (%s) came after %s loaded: %s may not apply to them, so this run's "
            "numbers may differ on another CPU; call "
            "shdh.runtime.instruction_set.pin_cpu() before importing them",
            SETTING,
            ", ".join(loaded),
            ", ".join(changed),
        )
    return mode


def pin_mode(environ: MutableMapping[str, str] = os.environ) -> str:
    """The mode this process runs in, for records: `avx2` only when every pinned variable holds
    its pinned value, `off` when asked, `unpinned` when nothing set the pin (a library user
    who did not call pin_cpu)."""
    if environ.get(SETTING, "").strip().lower() == "off":
        return "off"
    if all(environ.get(k) == v for k, v in AVX2_PIN.items()):
        return "avx2"
    return "unpinned"


def host_isa(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The widest vector instruction set of this CPU, as the records name it: avx512, avx2,
    or older; unknown where /proc/cpuinfo cannot be read (not Linux)."""
    try:
        with open(cpuinfo, encoding="utf-8", errors="replace") as f:
            flags = next(
                (line.split(":", 1)[1].split() for line in f if line.startswith("flags")), []
            )
    except OSError:
        return "unknown"
    if "avx512f" in flags:
        return "avx512"
    return "avx2" if "avx2" in flags else "older"


def describe() -> dict[str, str]:
    """What a run records about its CPU maths: the pin mode and the host's instruction set."""
    return {"cpu_pin": pin_mode(), "cpu_isa": host_isa()}
