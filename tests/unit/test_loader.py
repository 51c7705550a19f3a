"""The loader's batches: the same rows as the loop's own gather, in order, whatever the number of
workers and whatever holds the images (an array, a memory map, shards); and a fit trained with
loader workers ends with the same weights as one without."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
import torch

from shdh.data.dataset import load_dataset, write_dataset_streaming
from shdh.data.shards import MIB
from shdh.hashers.shdh import shdh_objective
from shdh.runtime.errors import ConfigError
from shdh.training.batches import Batches
from shdh.training.loader import PREFETCH_BATCHES, Loader, check_shared_memory
from shdh.training.loop import train
from shdh.training.loop_settings import RUNTIME_FIELDS, TrainConfig

pytestmark = pytest.mark.usefixtures("one_torch_thread")

N, SHAPE = 45, (6, 5, 3)


def _images(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (N, *SHAPE), dtype=np.uint8)


@pytest.fixture(scope="module")
def holders(tmp_path_factory):
    """The same images as an array, a memory map of images.npy and shards of 4 rows."""
    images = _images()
    root = tmp_path_factory.mktemp("holders")
    np.save(root / "images.npy", images)
    labels = np.array([f"a/b{i}" for i in range(N)])
    ids = np.arange(N, dtype=np.int64)

    def fill(out):
        out[:] = images

    write_dataset_streaming(root / "ds", N, SHAPE, labels, ids, "toy", fill, shard_mb=4 * 90 / MIB)
    return {
        "array": images,
        "memmap": np.load(root / "images.npy", mmap_mode="r"),
        "shards": load_dataset(root / "ds").images,
    }


def _expected(images, train_idx, order, batch_size):
    rows = train_idx[order.numpy()]
    return [images[rows[s : s + batch_size]] for s in range(0, len(rows), batch_size)]


@pytest.mark.parametrize("workers", [0, 1, 2])
@pytest.mark.parametrize("kind", ["array", "memmap", "shards"])
def test_batches_are_the_orders_rows_whatever_the_workers(holders, kind, workers):
    images = holders[kind]
    train_idx = np.random.default_rng(1).permutation(N)[:37]
    loader = Loader(images, train_idx, 8, workers)
    try:
        for epoch in range(2):  # persistent workers serve a second epoch in its own order
            order = torch.randperm(37, generator=torch.Generator().manual_seed(epoch))
            got = list(loader.epoch(order))
            want = _expected(holders["array"], train_idx, order, 8)
            assert [len(b) for b in got] == [8, 8, 8, 8, 5]
            for batch, rows in zip(got, want, strict=True):
                assert batch.dtype == torch.uint8 and np.array_equal(batch.numpy(), rows)
    finally:
        loader.close()


def test_an_epoch_left_half_read_does_not_leak_into_the_next(holders):
    loader = Loader(holders["shards"], np.arange(N), 4, 2)
    try:
        first = loader.epoch(torch.arange(N))
        next(first)
        order = torch.arange(N).flip(0)
        got = [b.numpy() for b in loader.epoch(order)]
        assert np.array_equal(np.concatenate(got), holders["array"][::-1])
    finally:
        loader.close()


def test_the_loader_checks_its_arguments(holders):
    with pytest.raises(ValueError, match="loader_workers: expected an integer >= 0, got -1"):
        Loader(holders["array"], np.arange(N), 4, -1)
    loader = Loader(holders["array"], np.arange(N), 4, 0)
    loader.close()
    with pytest.raises(RuntimeError, match="closed"):
        loader.epoch(torch.arange(N))


def test_workers_whose_batches_overflow_shared_memory_are_refused_up_front(tmp_path):
    import shutil

    # wide margins: other tests write and delete files on the same disk meanwhile
    free = shutil.disk_usage(tmp_path).free
    check_shared_memory(free // (10 * 2 * PREFETCH_BATCHES), 2, tmp_path)  # a tenth of it
    check_shared_memory(free, 0, tmp_path)  # no workers: nothing handed over
    with pytest.raises(ConfigError, match=r"train.loader_workers=2: .* in .*MiB free; 2 workers"):
        check_shared_memory(free // PREFETCH_BATCHES, 2, tmp_path)  # twice what is free


def test_batches_for_epoch_match_gather_and_skip_a_lone_trailing_item(holders):
    """The loop asks for every batch of the order but a trailing one of a single item."""
    train_idx = np.arange(N)
    order = torch.randperm(N, generator=torch.Generator().manual_seed(3))  # 45 = 4 * 11 + 1
    plain = Batches(holders["shards"], train_idx, torch.device("cpu"), 11)
    ahead = Batches(holders["shards"], train_idx, torch.device("cpu"), 11, workers=2)
    assert plain.for_epoch(order) == plain.gather
    fetch = ahead.for_epoch(order)
    for start in range(0, 44, 11):
        pos = order[start : start + 11]
        assert torch.equal(fetch(pos, pos), plain.gather(pos, pos))
    ahead.loader.close()


def test_a_memory_map_pickles_as_its_file_not_its_pixels(holders):
    """What spawn or forkserver workers receive."""
    loader = Loader(holders["memmap"], np.arange(N), 4, 0)
    rows = loader.loader.dataset
    data = pickle.dumps(rows)
    assert len(data) < 2000
    copy = pickle.loads(data)
    assert isinstance(copy.images, np.memmap)
    assert np.array_equal(copy[np.array([3, 0])].numpy(), holders["array"][[3, 0]])
    assert len(pickle.dumps(Loader(holders["shards"], np.arange(N), 4, 0).loader.dataset)) < 2000


def test_loader_workers_is_a_runtime_setting():
    assert "loader_workers" in RUNTIME_FIELDS
    with pytest.raises(ValueError, match="TrainConfig.loader_workers is out of range: -1"):
        TrainConfig(n_bits=16, width=1 / 16, image_size=8, device="cpu", loader_workers=-1)


SIZES, LEVELS, U = [8, 8], [2, 3], [0.0, 2 / 3, 1 / 3]
RUN = {
    "segment_sizes": SIZES,
    "segment_levels": LEVELS,
    "layer_weights": U,
    "objective": shdh_objective(SIZES, LEVELS, U),
}


def test_a_fit_with_loader_workers_ends_with_the_same_weights(holders, tmp_path):
    anc = np.array([[0, 1 + i % 2, 3 + i % 4] for i in range(N)])
    config = {"n_bits": 16, "width": 1 / 16, "image_size": 8, "batch_size": 11, "epochs": 2}
    results = []
    for workers, kind in ((0, "array"), (2, "shards"), (1, "memmap")):
        cfg = TrainConfig(**config, device="cpu", loader_workers=workers)
        out = tmp_path / f"{kind}-{workers}"
        results.append(train(cfg, holders[kind], anc, np.arange(N), out, **RUN))
    first = results[0].model.state_dict()
    for other in results[1:]:
        assert [h["loss"] for h in other.history] == [h["loss"] for h in results[0].history]
        for name, tensor in other.model.state_dict().items():
            assert torch.equal(tensor, first[name]), name
