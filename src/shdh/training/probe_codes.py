"""The probe: training items whose codes the loop follows across epochs, to see whether training
still moves them (docs/method.md: at the h~ = 0 saddle nothing moves).
"""

from dataclasses import dataclass

import numpy as np
import torch

from shdh.nets.hashing import HashingNet
from shdh.training.inference import encode_batch, forward_all, signs
from shdh.training.state import State

PROBE_SIZE = 1000  # training items whose codes are tracked across epochs


@dataclass
class Probe:
    """Training items whose codes are followed across epochs: does training move the codes?
    (docs/method.md: at the h~=0 saddle nothing moves.)"""

    images: np.ndarray
    idx: np.ndarray
    device: torch.device

    @classmethod
    def choose(
        cls, images: np.ndarray, train_idx: np.ndarray, seed: int, device: torch.device
    ) -> "Probe":
        n_train = len(train_idx)
        rng = np.random.default_rng([seed, 1])  # local: one probe set per seed
        probe = np.sort(rng.choice(n_train, size=min(PROBE_SIZE, n_train), replace=False))
        return cls(images, train_idx[probe], device)

    def codes(self, model: HashingNet) -> torch.Tensor:
        return signs(self._outputs(model))

    def diagnostics(self, state: State) -> dict[str, float]:
        """The probe's output scale, the share of its bits flipped since the last epoch (the
        new codes replace state.probe_codes) and the bits' balance."""
        z = self._outputs(state.model)
        codes = signs(z)  # (P, L)
        stats = {
            "mean_abs_z": float(z.abs().mean()),
            "flip_fraction": float((codes != state.probe_codes).float().mean()),
            "bit_balance": float(codes.float().mean(0).abs().mean()),  # 0 = every bit half/half
        }
        state.probe_codes = codes
        return stats

    def _outputs(self, model: HashingNet) -> torch.Tensor:
        batch = encode_batch(model)
        return forward_all(model, self.images, self.idx, batch, self.device)  # (P, L)
