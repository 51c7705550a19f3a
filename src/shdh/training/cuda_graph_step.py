"""The training step replayed as one CUDA graph.

At batch 128 a step of the paper's network launches some hundred small kernels (the network,
the loss, the backward pass, clipping, SGD), and on a fast card the host cannot issue them as
fast as the card runs them: the loop is bound by Python and the launch queue, not by the GPU.
Captured once as a CUDA graph, the whole step is one launch. The graph computes what the eager
step computes, kernel for kernel; what it needs (torch.cuda.graphs):

- fixed addresses: each batch's inputs (uint8 images, ancestors, positions) are copied into
  static buffers;
- warm state before capture: the first WARMUP_STEPS steps run eagerly (on a side stream, as
  the CUDA graph docs ask), which also creates SGD's momentum buffers and tunes cuDNN;
- gradients allocated by the capture: they are set to None just before it, and replay
  overwrites them, so no zero_grad runs inside the graph; an eager step between replays (the
  short last batch of an epoch) zeroes them in place, keeping the graph's buffers;
- a constant learning rate: SGD reads it as a number when the graph is captured, so a changed
  rate is captured anew (a few times per fit).
- other threads left alone: the capture restricts only its own thread, so that a loader's
  pin-memory thread may keep staging batches while it runs.

Where capture fails (an operation a graph cannot hold, an older driver), the step warns once and
runs eagerly from then on: the fit continues with the same arithmetic, only slower. With the
graph off (a CPU fit, a memory bank, config.cuda_graph false) every step runs eagerly, so the
training loop has one step object whatever the device.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import torch

log = logging.getLogger(__name__)

WARMUP_STEPS = 3
# step(*inputs) -> the detached (loss, parts); the inputs are tensors of fixed shape per batch size
Step = Callable[..., tuple[torch.Tensor, dict[str, torch.Tensor]]]


class GraphedStep:
    """step(*inputs) -> (loss, parts), run eagerly for the warm-up, then replayed; with
    graph=False always run eagerly (zero_grad, then the step).

    `step` does the forward pass, the loss, backward, clipping and the optimiser step, but not
    zero_grad; its outputs are detached. The returned tensors of a replay are the graph's own
    outputs: read or copy them before the next call."""

    def __init__(
        self,
        step: Step,
        optimizer: torch.optim.Optimizer,
        device: torch.device,
        *,
        graph: bool = True,
    ) -> None:
        self.step, self.optimizer, self.device = step, optimizer, device
        self.use_graph = graph
        self.graph: torch.cuda.CUDAGraph | None = None
        self.lr: float | None = None
        self.warm = 0
        self.failed = False
        self.replays = 0

    def __call__(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        if self.failed or not self.use_graph:
            return self.eager(*inputs)
        if self.warm < WARMUP_STEPS:
            self.warm += 1
            return self._on_side_stream(*inputs)
        lr = self.optimizer.param_groups[0]["lr"]
        if self.graph is None or lr != self.lr:
            try:
                self._capture(inputs, lr)
            except Exception as err:  # noqa: BLE001 - any capture failure falls back alike
                log.warning("CUDA graph capture failed (%s: %s); eager steps", type(err), err)
                self.failed, self.graph = True, None
                self.optimizer.zero_grad(set_to_none=True)
                return self.eager(*inputs)
        for static, value in zip(self.static_inputs, inputs, strict=True):
            static.copy_(value)
        self.graph.replay()
        self.replays += 1
        return self.outputs

    def eager(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """One step without the graph; after a capture the gradients are zeroed in place, so
        that they stay the buffers the graph writes and reads."""
        self.optimizer.zero_grad(set_to_none=self.graph is None)
        return self.step(*inputs)

    def _on_side_stream(
        self, *inputs: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        side = torch.cuda.Stream(self.device)
        side.wait_stream(torch.cuda.current_stream(self.device))
        with torch.cuda.stream(side):
            out = self.eager(*inputs)
        torch.cuda.current_stream(self.device).wait_stream(side)
        return out

    def _capture(self, inputs: tuple[torch.Tensor, ...], lr: float) -> None:
        self.graph = None  # releases the last graph's gradient buffers with the graph
        self.static_inputs = tuple(value.clone() for value in inputs)
        self.optimizer.zero_grad(set_to_none=True)
        graph = torch.cuda.CUDAGraph()
        # thread_local: the DataLoader's pin-memory thread allocates pinned host memory while the
        # next batch is staged; in the default global mode that call fails the capture and
        # leaves the thread's error to kill the fit at the next batch (seen with 12 workers).
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            self.outputs = self.step(*self.static_inputs)
        self.graph, self.lr = graph, lr
        log.info("training step captured as a CUDA graph (lr %g)", lr)
