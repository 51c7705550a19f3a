"""Fixtures shared by the whole suite: tiny data in the exact upstream formats, and isolation.

Every test gets its own MLflow store so that no test writes mlflow.db into the repository.
"""

from __future__ import annotations

import os

from shdh.runtime.instruction_set import pin_cpu
from tests.suite_threads import ONE_THREAD

# Before numpy, torch or numba load, and inherited by every process the suite starts. One thread
# per maths library: the workers (more of them than cores, Makefile) and the stage processes they
# start would otherwise each run a pool of a thread per core, contending for the same cores; the
# smoke profile's reference metrics are recorded at one thread. The pin: the suite's numbers are
# those of the AVX2 code path on every CPU (shdh.runtime.instruction_set).
os.environ.update(ONE_THREAD)
pin_cpu()

import atexit  # noqa: E402
import contextlib  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
from collections.abc import Iterator  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

# The suite writes nothing into the checkout: checked from the session's start to its end.
from tests.checkout_guard import (  # noqa: E402, F401
    pytest_configure,
    pytest_sessionfinish,
    pytest_terminal_summary,
)
from tests.tracking_store import copy_store, make_empty_store, remove_if_unused  # noqa: E402

REPO = Path(__file__).resolve().parents[1]

# The suite's own caches of codes and scores (shdh.steps.codes_cache, score_cache), inherited by
# the commands it runs: never the user's ~/.cache, and empty at each session's start, so that no
# test reads codes or scores that an earlier session (of other code, on other data) left behind.
os.environ["SHDH_CACHE_DIR"] = tempfile.mkdtemp(prefix="shdh-test-cache-")
atexit.register(shutil.rmtree, os.environ["SHDH_CACHE_DIR"], ignore_errors=True)

# Fixtures that start a server (a process, or an HTTP listener on a loopback port). A test that
# uses one is an integration test wherever it lives, so `-m "not integration"` (make test-fast)
# leaves it out without each test having to say so.
SERVER_FIXTURES = frozenset({"s3_server", "server", "kubeflow", "milvus_server"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if SERVER_FIXTURES.intersection(item.fixturenames):
            item.add_marker(pytest.mark.integration)
    items[:] = slow_files_first(items)


def slow_files_first(items: list[pytest.Item]) -> list[pytest.Item]:
    """The files that hold a slow or integration test first, each file's tests in their order.

    `make test` hands whole files to its workers in this order (--dist loadfile,
    --no-loadscope-reorder): the minutes-long files start at once and the many short ones fill
    in behind them, so the workers finish together instead of one running an end-to-end file
    alone at the end."""
    slow = {
        item.path
        for item in items
        if item.get_closest_marker("slow") or item.get_closest_marker("integration")
    }
    return sorted(items, key=lambda item: item.path not in slow)


@contextlib.contextmanager
def as_dvc_stage(stage: str) -> Iterator[None]:
    """Run a step command as DVC runs a stage's: with DVC_STAGE set, so that its runs nest under
    the pipeline run of its settings (a step run by hand gets a parent run of its own)."""
    from shdh.commands.common import DVC_STAGE_ENV

    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(DVC_STAGE_ENV, stage)
        yield


@pytest.fixture(scope="session")
def empty_tracking_store(tmp_path_factory) -> Path | None:
    return make_empty_store(tmp_path_factory.mktemp("empty-mlflow-store"))


@pytest.fixture(autouse=True)
def isolated_tracking(tmp_path, tmp_path_factory, empty_tracking_store, monkeypatch):
    """A store of the test's own, beside tmp_path (whose listings tests check), named after it."""
    folder = tmp_path_factory.getbasetemp() / "mlflow-stores" / tmp_path.name
    store = copy_store(empty_tracking_store, folder)
    copied = store.stat() if store.is_file() else None
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{store}")
    monkeypatch.setenv("GIT_PYTHON_REFRESH", "quiet")
    yield
    remove_if_unused(store, copied)


@pytest.fixture
def one_torch_thread():
    """One torch CPU thread for tiny networks, where threads only add overhead; restored after,
    because float sums (and so trained weights) depend on the thread count and later tests
    compare runs made in this process with runs made in subprocesses."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def write_fashion_mnist_raw(
    raw_dir: Path, n_train: int = 240, n_test: int = 60, seed: int = 0
) -> Path:
    """Fashion-MNIST-shaped IDX files (upstream names and layout) with class-dependent images.

    Each class gets its own bright square, so a tiny network can learn it in one or two epochs.
    """
    from shdh.data.idx import write_idx

    rng = np.random.default_rng(seed)
    raw_dir.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("t10k", n_test)):
        labels = (np.arange(n) % 10).astype(np.uint8)
        rng.shuffle(labels)
        images = rng.integers(0, 40, size=(n, 28, 28), dtype=np.uint8)
        for i, c in enumerate(labels):
            r, col = divmod(int(c), 5)
            images[i, 4 + 10 * r : 12 + 10 * r, 2 + 5 * col : 6 + 5 * col] = 220
        write_idx(raw_dir / f"{split}-images-idx3-ubyte", images, gzip_compress=False)
        write_idx(raw_dir / f"{split}-labels-idx1-ubyte", labels, gzip_compress=False)
    return raw_dir


@pytest.fixture
def fashion_raw(tmp_path) -> Path:
    return write_fashion_mnist_raw(tmp_path / "raw")
