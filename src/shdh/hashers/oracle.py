"""The classifier oracle: a reference row that bounds what the backbone allows.

The same CNN-F backbone is trained with plain cross-entropy on the finest labels; an item's code
is then built from its *predicted* class path: one fixed random +-1 pattern per tree node, the
pattern of the path's node at level k filling SHDH's segment for level k, ranked with SHDH's
weighted Hamming distance. Items predicted into the same class get identical codes, items
predicted into the same superclass share that segment, and so on: the ranking is as good as
the classifier. Where SHDH falls short of this row, the hashing loses what the backbone could
have given; where both fall short of perfect, the backbone is the limit.

The code length only sizes the patterns (code_only_params), so shdh.steps.fit trains the
classifier once per seed and builds the other lengths' codes from that checkpoint.

Single-label data only: a multi-label item has no one class path to predict.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

import numpy as np
import torch

from shdh.core.level_weights import segment_levels, segment_sizes
from shdh.hashers.deep import STATE_FIELDS, DeepHasher, level_segment_sizes, level_segment_weights
from shdh.hashers.method_settings import OracleSettings
from shdh.training import inference
from shdh.training.objective import Bank, Objective, Task


def node_pattern(seed: int, level: int, node: int, size: int) -> np.ndarray:
    """The fixed random +-1 pattern (size,) of one tree node at one level, from the seed alone,
    so that every class under the node carries the same bits in that level's segment."""
    rng = np.random.default_rng([seed, level, node, 20170407])
    return np.where(rng.random(size) < 0.5, -1, 1).astype(np.int8)


def class_codes(paths: np.ndarray, sizes: Sequence[int], levels: Sequence[int], seed: int):
    """(C, L) int8 codes of C classes from their ancestor paths (C, K): per segment, the pattern
    of the path's node at the segment's level (1-based, level 1 = the root)."""
    parts = [
        np.stack([node_pattern(seed, k, int(path[k - 1]), size) for path in paths])
        for size, k in zip(sizes, levels, strict=True)
    ]
    return np.concatenate(parts, axis=1)


class CrossEntropy(Objective):
    """Cross-entropy of the class scores z (B, C) against each item's finest node: its row in
    the sorted finest-level ids of the training items (Oracle.classes_), one network output
    each."""

    name: ClassVar[str] = "cross-entropy"

    def __init__(self, settings: OracleSettings, task: Task) -> None:
        super().__init__(settings, task)
        classes = torch.as_tensor(np.unique(task.ancestors[:, -1]))
        lookup = torch.full((int(classes.max()) + 1,), -1, dtype=torch.long)
        lookup[classes] = torch.arange(len(classes))
        self.register_buffer("lookup", lookup, persistent=False)  # moves with .to(device)

    def forward(
        self, z: torch.Tensor, anc: torch.Tensor, bank: Bank = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        target = self.lookup[anc[:, -1].long()]
        reduction = self.settings.reduction
        loss = torch.nn.functional.cross_entropy(z.float(), target, reduction=reduction)
        accuracy = (z.argmax(dim=1) == target).float().mean()
        return loss, {"accuracy": accuracy.detach()}


class Oracle(DeepHasher):
    """Cross-entropy classifier on the shared backbone; codes from the predicted class path."""

    supervision: ClassVar[str | None] = "hierarchical"
    objective = CrossEntropy
    # The network outputs class scores whatever the code length; n_bits only sizes the patterns.
    code_only_params: ClassVar[tuple[str, ...]] = ("n_bits",)

    def code_layout(self, K: int) -> tuple[list[int], list[int]]:
        return segment_sizes(self.n_bits, K, "levels"), segment_levels(K, "levels")

    def _net_layout(self, sizes: list[int], levels: list[int]) -> tuple[list[int], list[int]]:
        return [len(self.classes_)], [int(self.K_)]  # one output per class, at the finest level

    def _prepare(self, anc: np.ndarray) -> None:
        """The classes and their codes: the validation score encodes with them while training
        goes on."""
        if anc.ndim != 2:
            raise ValueError(
                f"{self.name}: needs one class path per item, got ancestor sets of shape "
                f"{anc.shape} (multi-label data has no single class to predict)"
            )
        self.classes_, first = np.unique(anc[:, -1], return_index=True)
        self.class_paths_ = anc[first].astype(np.int64)  # (C, K), the path of each class
        sizes, levels = self.code_layout(int(anc.shape[1]))
        self.class_codes_ = class_codes(self.class_paths_, sizes, levels, self.seed)

    def segment_sizes(self) -> list[int]:
        return level_segment_sizes(self)

    def segment_weights(self) -> list[float]:
        return level_segment_weights(self)

    def _encode(self, X: np.ndarray) -> np.ndarray:
        return self.class_codes_[self._predicted_index(X)]

    def predict_classes(self, X: np.ndarray) -> np.ndarray:
        """The finest label each image is predicted to carry (the oracle's classifier)."""
        self._check_fitted()
        return self.classes_[self._predicted_index(X)]

    def _predicted_index(self, X: np.ndarray) -> np.ndarray:
        """Row of classes_ (and class_codes_) with the highest logit, for each image."""
        images = self._encode_input(X)
        z = inference.outputs(
            self.model_, images, device=self.loop.device, num_threads=self.loop.num_threads
        )
        return z.argmax(dim=1).cpu().numpy()

    def _state_fields(self) -> tuple[str, ...]:
        return (*STATE_FIELDS, "classes_", "class_paths_", "class_codes_")
