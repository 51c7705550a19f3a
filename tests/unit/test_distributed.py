"""One fit over several processes (shdh.training.distributed): the ranks' shares of the seeded
order, and a two-process fit under torchrun (Gloo, CPU) against the one-process fit of the
doubled batch, which it must match to float sums, and which it must resume exactly."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from shdh.training.distributed import World, check_settings
from shdh.training.loop_settings import TrainConfig
from tests.conftest import REPO

# Two processes with batch B against one with 2B: the same updates but for the order of float
# sums (the ranks' gradients are averaged by an all-reduce), so weights agree to this.
WEIGHT_TOLERANCE = 1e-4


def test_one_process_takes_every_batch_but_a_lone_trailing_item():
    steps = list(World().steps(11, 4))
    assert [(s, m.start, m.stop) for s, m, _ in steps] == [(1, 0, 4), (2, 4, 8), (3, 8, 12)]
    assert all(m == w for _, m, w in steps)
    assert [s for s, _, _ in World().steps(9, 4)] == [1, 2]  # 8..9 holds one item: skipped


def test_each_rank_takes_its_part_of_every_full_global_batch():
    order = torch.arange(21)
    parts = []
    for rank in range(2):
        world = World(rank=rank, size=2)
        steps = list(world.steps(21, 4))
        assert [s for s, _, _ in steps] == [1, 2]  # 16..20 is not a full global batch of 8
        assert [(w.start, w.stop) for _, _, w in steps] == [(0, 8), (8, 16)]
        parts.append(world.own_order(order, 4))
    assert parts[0].tolist() == [0, 1, 2, 3, 8, 9, 10, 11]
    assert parts[1].tolist() == [4, 5, 6, 7, 12, 13, 14, 15]


def test_a_bad_environment_and_unsupported_settings_are_refused(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("RANK", "2")
    with pytest.raises(ValueError, match="RANK=2 is not a rank of WORLD_SIZE=2"):
        World.from_env()
    monkeypatch.setenv("RANK", "x")
    with pytest.raises(ValueError, match="must be integers"):
        World.from_env()
    with pytest.raises(ValueError, match="train.memory_bank: not with several processes"):
        check_settings(TrainConfig(memory_bank=True))


def fit(tmp_path, name: str, processes: int, batch_size: int, epochs: int, resume="never"):
    out = tmp_path / name
    out.mkdir(exist_ok=True)
    module = ["-m", "tests.unit.distributed_fit", str(out), str(batch_size), str(epochs), resume]
    if processes > 1:
        launch = ["-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}"]
        command = [sys.executable, *launch, *module]
    else:
        command = [sys.executable, *module]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    weights = torch.load(out / "weights.pt", weights_only=True)
    return weights, json.loads((out / "history.json").read_text())


@pytest.fixture(scope="module")
def one_and_two(tmp_path_factory):
    """The fit on one process at batch 8, and on two at batch 4 (each rank then also takes a
    batch-norm step: tests/unit/distributed_bn.py)."""
    tmp = tmp_path_factory.mktemp("distributed")
    return tmp, fit(tmp, "one", 1, 8, 2), fit(tmp, "two", 2, 4, 2)


@pytest.mark.slow
def test_the_cpu_batch_norm_of_two_processes_is_one_batch_norm_of_the_whole_batch(one_and_two):
    from tests.unit.distributed_bn import batch

    tmp = one_and_two[0]
    ranks = [torch.load(tmp / "two" / f"bn-rank{r}.pt", weights_only=True) for r in range(2)]
    x, w = batch()
    x.requires_grad_(True)
    plain = torch.nn.BatchNorm2d(3)
    y = plain(x)
    (y * w).sum().backward()
    tolerance = {"atol": 1e-5, "rtol": 1e-5}  # the sums' order differs; nothing else does
    torch.testing.assert_close(torch.cat([r["y"] for r in ranks]), y.detach(), **tolerance)
    torch.testing.assert_close(torch.cat([r["grad"] for r in ranks]), x.grad, **tolerance)
    for r in ranks:  # every rank keeps the whole batch's running statistics
        torch.testing.assert_close(r["running_mean"], plain.running_mean, **tolerance)
        torch.testing.assert_close(r["running_var"], plain.running_var, **tolerance)


@pytest.mark.slow
def test_two_processes_match_one_with_the_doubled_batch_and_resume_exactly(one_and_two):
    tmp_path, (one, one_history), (two, two_history) = one_and_two
    for key, value in one.items():
        if value.is_floating_point():
            np.testing.assert_allclose(two[key], value, atol=WEIGHT_TOLERANCE, err_msg=key)
    for a, b in zip(one_history, two_history, strict=True):
        assert b["loss"] == pytest.approx(a["loss"], rel=1e-4)
    assert any((two[k] - v).abs().max() > 0 for k, v in one.items() if v.is_floating_point())
    fit(tmp_path, "resumed", 2, 4, 1)
    resumed, history = fit(tmp_path, "resumed", 2, 4, 2, resume="always")
    timings = ("seconds", "images_per_sec")
    assert [{k: v for k, v in e.items() if k not in timings} for e in history] == [
        {k: v for k, v in e.items() if k not in timings} for e in two_history
    ]
    for key, value in two.items():
        assert torch.equal(resumed[key], value), key
