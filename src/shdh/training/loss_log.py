"""One epoch's loss and its parts, kept on the training device and read back in batches of
steps, so that watching the loss costs no host sync per step.
"""

import math

import torch

# A host sync drains the GPU's queue; the loop reads its losses back once per this many steps
# (and at the end of each epoch) to watch for a non-finite loss and refresh the progress bar.
SYNC_EVERY = 50


class LossLog:
    """One epoch's loss and its parts, kept on the device step by step and read back every
    SYNC_EVERY steps: reading a value is a host sync, which drains the GPU's queue.

    The epoch means are sums, in step order and in float64, of the fp32 values: the same to the
    last bit as summing `loss.item()` after every step, without its sync per step."""

    def __init__(self, n_steps: int, device: torch.device) -> None:
        self.values: dict[str, torch.Tensor] = {}
        self.n_steps, self.device = n_steps, device
        self.steps: list[int] = []  # the loop's step number of each record (lone items skip one)
        self.checked = 0
        self.last = math.nan  # the last loss read back, for the progress bar

    def add(self, step: int, loss: torch.Tensor, parts: dict[str, torch.Tensor]) -> None:
        i = len(self.steps)
        for key, value in {"loss": loss, **parts}.items():
            if key not in self.values:
                self.values[key] = torch.full(
                    (self.n_steps,), math.nan, dtype=torch.float64, device=self.device
                )
            self.values[key][i] = value.detach()
        self.steps.append(step)

    def first_non_finite(self) -> tuple[int, float] | None:
        """(step, loss) of the first non-finite loss since the last check, or None."""
        new = self.values["loss"][self.checked : len(self.steps)].tolist() if self.steps else []
        if new:  # the bar shows it: read with the check, not in a host sync of its own
            self.last = new[-1]
        for offset, value in enumerate(new):
            if not math.isfinite(value):
                return self.steps[self.checked + offset], value
        self.checked = len(self.steps)
        return None

    def means(self) -> dict[str, float]:
        """Per-step means; e1 and e2 are NaN for a loss without those parts (the oracle's)."""
        n = len(self.steps)
        sums = {key: math.nan for key in ("loss", "e1", "e2")}
        for key, values in self.values.items():
            total = 0.0
            for value in values[:n].tolist():  # not sum(): Python 3.12 compensates its rounding
                total += value
            sums[key] = total
        return {key: value / max(n, 1) for key, value in sums.items()}
