"""The thread counts the suite runs its maths libraries at, apart so that a test that needs the
libraries' defaults (a comparison with a container, which starts a thread per core) can take
them out again."""

from __future__ import annotations

from collections.abc import Mapping

# torch's intra-op pool (OpenMP), numpy's BLAS (OpenBLAS, or MKL where it is the BLAS): the names
# of shdh.steps.codes_cache.THREAD_SETTINGS, spelt here because that module imports numpy, and
# these must be set before numpy loads.
ONE_THREAD = {name: "1" for name in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")}


def without_suite_threads(environ: Mapping[str, str]) -> dict[str, str]:
    """`environ` less the variables the suite sets, so that the libraries size their pools as
    they would for a user."""
    return {k: v for k, v in environ.items() if k not in ONE_THREAD}
