"""The CUDA-graph training step (shdh.training.cuda_graph_step): where capture fails, the fit goes
on with eager steps that compute what plain eager steps compute; on a card, graphed and eager
training agree (benchmarks/gpu_graph_check.py measured them equal on an H200)."""

import copy

import pytest
import torch

from shdh.training import cuda_graph_step
from shdh.training.cuda_graph_step import GraphedStep


def _model_and_step(device: torch.device | None = None, fused: bool | None = None):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    model.to(device)  # before the optimiser: fused SGD checks its parameters' device
    optimizer = torch.optim.SGD(
        model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3, fused=fused
    )

    def step(x: torch.Tensor, y: torch.Tensor):
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return loss.detach(), {}

    return model, optimizer, step


def _batches(n: int = 8):
    gen = torch.Generator().manual_seed(1)
    return [(torch.randn(16, 6, generator=gen), torch.randint(0, 3, (16,), generator=gen))] * n


def test_a_failed_capture_falls_back_to_eager_steps_that_train_alike(monkeypatch, caplog):
    """Warm-up steps, then a capture that fails (as on a driver without graph support): the
    step warns once, and every step, the one whose capture failed included, trains exactly as
    plain eager steps do."""
    model, optimizer, step = _model_and_step()
    reference = copy.deepcopy(model)
    ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
    # On the CPU the warm-up's side stream is the step itself, and capture cannot happen.
    monkeypatch.setattr(GraphedStep, "_on_side_stream", GraphedStep.eager)

    def no_graphs(*args, **kwargs):
        raise RuntimeError("CUDA graphs are not supported here")

    monkeypatch.setattr(cuda_graph_step.torch.cuda, "CUDAGraph", no_graphs)
    graphed = GraphedStep(step, optimizer, torch.device("cpu"))
    with caplog.at_level("WARNING", logger="shdh.training.cuda_graph_step"):
        losses = [float(graphed(x, y)[0]) for x, y in _batches()]
    ref_losses = []
    for x, y in _batches():
        ref_optimizer.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(reference(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(reference.parameters(), 1.0)
        ref_optimizer.step()
        ref_losses.append(float(loss))
    assert losses == ref_losses
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.equal(a, b)
    assert graphed.failed and graphed.replays == 0
    warnings = [r for r in caplog.records if "capture failed" in r.getMessage()]
    assert len(warnings) == 1 and "not supported here" in warnings[0].getMessage()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("fused", [None, True])
def test_graphed_and_eager_steps_train_alike_on_a_card(fused):
    """Replays compute what eager steps compute: the same losses and weights (to bf16-free
    float rounding), the learning rate's change captured anew, the graph replayed; with torch's
    default SGD kernels and with fused SGD (train.fused_sgd) in the graph."""
    device = torch.device("cuda")
    model, optimizer, step = _model_and_step(device, fused)
    reference = copy.deepcopy(model)
    ref_optimizer = torch.optim.SGD(reference.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
    graphed = GraphedStep(step, optimizer, device)
    for i, (x, y) in enumerate(_batches(12)):
        x, y = x.to(device), y.to(device)
        if i == 8:  # a decay: the graph must be captured again with the new rate
            for opt in (optimizer, ref_optimizer):
                opt.param_groups[0]["lr"] = 0.05
        loss, _ = graphed(x, y)
        ref_optimizer.zero_grad(set_to_none=True)
        ref = torch.nn.functional.cross_entropy(reference(x), y)
        ref.backward()
        torch.nn.utils.clip_grad_norm_(reference.parameters(), 1.0)
        ref_optimizer.step()
        assert float(loss) == pytest.approx(float(ref), rel=1e-5)
    assert graphed.replays == 12 - cuda_graph_step.WARMUP_STEPS and graphed.lr == 0.05
    for a, b in zip(model.parameters(), reference.parameters(), strict=True):
        assert torch.allclose(a, b, atol=1e-5)


def test_the_capture_leaves_other_threads_cuda_calls_alone(monkeypatch):
    """The capture asks for thread_local mode: in the default global one, a loader's pin-memory
    thread allocating pinned memory during the capture fails it, and that thread's error then
    ends the fit at the next batch (as a loader benchmark with 12 workers did on an H200)."""
    modes = []

    class Recording:
        def __init__(self, graph, **kwargs):
            modes.append(kwargs.get("capture_error_mode"))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(GraphedStep, "_on_side_stream", GraphedStep.eager)
    monkeypatch.setattr(cuda_graph_step.torch.cuda, "CUDAGraph", lambda: object())
    monkeypatch.setattr(cuda_graph_step.torch.cuda, "graph", Recording)
    _, optimizer, step = _model_and_step()
    graphed = GraphedStep(step, optimizer, torch.device("cpu"))
    (x, y), *_ = _batches(1)
    for _ in range(cuda_graph_step.WARMUP_STEPS):
        graphed(x, y)
    graphed._capture((x, y), 0.1)
    assert modes == ["thread_local"] and not graphed.failed


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_a_thread_pinning_memory_during_the_capture_does_not_break_it():
    """A pin-memory thread at work, as a DataLoader's is while the next batch is staged: the
    graph is captured and replayed, and the thread's calls all succeed."""
    import threading

    device = torch.device("cuda")
    _, optimizer, step = _model_and_step(device)
    graphed = GraphedStep(step, optimizer, device)
    errors, stop = [], threading.Event()

    def pin() -> None:
        while not stop.is_set():
            try:
                torch.empty(1 << 18).pin_memory()
            except Exception as err:  # noqa: BLE001 - the test reports whatever it was
                errors.append(err)
                return

    thread = threading.Thread(target=pin, daemon=True)
    thread.start()
    try:
        for x, y in _batches(cuda_graph_step.WARMUP_STEPS + 4):
            graphed(x.to(device), y.to(device))
    finally:
        stop.set()
        thread.join()
    assert not graphed.failed and graphed.replays == 4
    assert errors == []
