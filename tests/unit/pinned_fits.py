"""Small fits of every kind of CPU maths the pipeline runs, as digests of their outputs: the
GIST features (FFTs, exp), a shallow method of each family (SVD, k-means, gradient steps,
kernels) and the two deep losses (convolutions, matmuls, reductions).

    python -m tests.unit.pinned_fits    # prints {name: digest} as JSON

tests/unit/test_instruction_set.py runs it in a child process under the CPU pin
(shdh.runtime.instruction_set), so the pin is applied before numpy and torch load as in every front
door, and compares the digests with the ones an AVX2 machine gave: an AVX-512 machine must give the
same.
"""

from __future__ import annotations

if __name__ == "__main__":  # before numpy and torch load, as the front doors do
    from shdh.runtime.instruction_set import pin_cpu

    pin_cpu()

import hashlib  # noqa: E402
import json  # noqa: E402

import numpy as np  # noqa: E402

SHALLOW_BUDGETS = {
    "itq": {"n_iter": 20},
    "kmh": {"n_iter": 10},
    "ksh": {"n_anchors": 60, "n_labelled": 300, "n_iter": 100},
    "lfh": {"n_iter": 10, "n_sampled": 64},
    "cosdish": {"n_outer": 3, "n_alternations": 2},
}
DEEP = {"width": 1 / 16, "image_size": 8, "epochs": 1, "batch_size": 64, "device": "cpu"}


def _digest(*arrays: np.ndarray) -> str:
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def digests() -> dict[str, str]:
    import torch

    from shdh.core.level_weights import layer_weights
    from shdh.features.gist import gist_features
    from shdh.hashers import hasher_class
    from shdh.hashers.supervision import PairSimilarity
    from tests.unit.toys import TREE, deep_hasher, tree_set

    torch.set_num_threads(1)  # float sums depend on the thread count; one CPU of any machine
    features, images, anc = tree_set(seed=0, per_leaf=40)
    u = layer_weights(TREE.height)
    out = {"gist": _digest(gist_features(images[:16], image_size=32))}
    for name, budget in SHALLOW_BUDGETS.items():
        cls = hasher_class(name)
        hasher = cls(n_bits=16, seed=0, **budget)
        hasher.fit(features, PairSimilarity(anc, u, cls.supervision or "label"))
        out[name] = _digest(hasher.encode(features))
    for name in ("shdh", "dpsh"):
        cls = hasher_class(name)
        hasher = deep_hasher(cls, n_bits=16, seed=0, **DEEP)
        hasher.fit(images, PairSimilarity(anc, u, cls.supervision or "label"))
        losses = np.asarray([h["loss"] for h in hasher.history_])
        out[name] = _digest(hasher.encode(images), losses)
    return out


if __name__ == "__main__":
    print(json.dumps(digests(), sort_keys=True))
