"""A deep hasher's saved state, without pickle: the network weights as named arrays
"net.<parameter name>" plus K, the segment sizes and levels, the layer weights u and the training
image shape; on load the network is rebuilt from them, and state that belongs to other settings
is refused."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from shdh.training.checkpoint import build_model_for

NET_PREFIX = "net."  # state.npz keys of the network weights
STATE_FIELDS = ("K_", "segment_sizes_", "segment_levels_", "layer_weights_", "image_shape_")


class SavedNetwork:
    """save/load of a deep hasher (shdh.hashers.deep.DeepHasher): Hasher's files, with the
    network's weights among the arrays."""

    def _state_fields(self) -> tuple[str, ...]:
        return STATE_FIELDS

    def state(self) -> dict[str, np.ndarray]:
        self._check_fitted()
        arrays = {name: np.asarray(getattr(self, name)) for name in self._state_fields()}
        for key, tensor in self.model_.state_dict().items():
            arrays[NET_PREFIX + key] = tensor.detach().cpu().numpy()
        return arrays

    def save(self, directory: str | Path) -> Path:
        """Write params.json + state.npz; refuses to swap out the directory holding work_dir."""
        if self.work_dir is not None:
            target, work = Path(directory).resolve(), Path(self.work_dir).resolve()
            if work == target or target in work.parents:
                raise ValueError(
                    f"{self.name}: save({directory}) would replace work_dir {self.work_dir} "
                    "(its checkpoint); save the model elsewhere"
                )
        return super().save(directory)

    def _after_load(self) -> None:
        """Rebuild the network from the loaded arrays; refuse state from another setting."""
        net = {}
        for key in [k for k in vars(self) if k.startswith(NET_PREFIX)]:
            net[key[len(NET_PREFIX) :]] = torch.from_numpy(np.array(vars(self).pop(key)))
        missing = [name for name in self._state_fields() if not hasattr(self, name)]
        if missing or not net:
            raise _StateError(f"missing fields {missing or ['net.*']}")
        net_sizes = _net_sizes(self, net)
        shape = [int(s) for s in self.image_shape_]
        model = build_model_for(self.loop, shape[2] if len(shape) == 3 else 1, net_sizes)
        try:
            model.load_state_dict(net, strict=True)
        except RuntimeError as err:
            raise _StateError(
                f"the network weights do not fit {self.name} with backbone="
                f"{self.loop.backbone}, width={self.loop.width}, image_size="
                f"{self.loop.image_size}: {err}"
            ) from err
        self.model_ = model.eval()
        self.history_ = []  # the epoch history lives in the checkpoint, not in the model


class _StateError(ValueError):
    """A state.npz that does not belong to this hasher's parameters."""


def _net_sizes(hasher: Any, net: dict[str, torch.Tensor]) -> list[int]:
    """The network's output segments for the loaded layout, once the layout is the method's
    own for this bit length and the weights' head has as many rows."""
    K = int(hasher.K_)
    sizes = [int(s) for s in hasher.segment_sizes_]
    levels = [int(k) for k in hasher.segment_levels_]
    if sum(sizes) != hasher.n_bits:
        raise _StateError(
            f"field 'segment_sizes_' {sizes} holds {sum(sizes)} bits but params.json has "
            f"n_bits={hasher.n_bits}: the state belongs to another bit length"
        )
    if (sizes, levels) != hasher._layout(K):
        raise _StateError(
            f"fields 'segment_sizes_'/'segment_levels_' {sizes}/{levels} do not match "
            f"{hasher.name}'s layout {hasher._layout(K)} for K={K}"
        )
    net_sizes, _ = hasher._net_layout(sizes, levels)
    head = net.get("head.weight")
    if head is None or head.shape[0] != sum(net_sizes):
        rows = None if head is None else head.shape[0]
        raise _StateError(
            f"field 'net.head.weight' has {rows} output rows, {hasher.name} with "
            f"n_bits={hasher.n_bits} has {sum(net_sizes)}"
        )
    return net_sizes
