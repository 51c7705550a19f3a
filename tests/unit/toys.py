"""Toy hierarchical data shared by the hashers' tests (the contract test and per-method files)."""

from __future__ import annotations

import dataclasses

import numpy as np

from shdh.core.hierarchy import LabelTree
from shdh.training.loop_settings import LOOP_FIELDS, RUNTIME_FIELDS, LoopSettings

# The contract's tree: 3 superclasses x 3 classes under the root (K = 3).
N_SUPER, N_CLASS = 3, 3
TREE = LabelTree.from_nested(
    {f"g{a}": {f"g{a}c{b}": {} for b in range(N_CLASS)} for a in range(N_SUPER)}
)
# A deep hasher small enough for a unit test: a 1/16-width CNN-F on 8x8 inputs, one epoch, one
# CPU thread (threads only add overhead to a net this small).
TINY_NET = {
    "width": 1 / 16,
    "image_size": 8,
    "epochs": 1,
    "batch_size": 64,
    "device": "cpu",
    "num_threads": 1,
}


def tree_set(seed: int, per_leaf: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(features (N, 32) float32, images (N, 32, 32) uint8, ancestors (N, 3)) on TREE, shuffled.

    Features: Gaussian clusters per leaf around a per-superclass centre, so sibling leaves are
    closer than cousins. Images: the superclass lights a horizontal band, the class a brighter
    block inside it, so siblings share the band. Centres come from a fixed seed; `seed` draws
    the items, so training and query sets share classes but not items.
    """
    centres = np.random.default_rng(1234)
    super_c = 6.0 * centres.standard_normal((N_SUPER, 32))
    leaf_c = super_c.repeat(N_CLASS, axis=0) + 2.5 * centres.standard_normal(
        (N_SUPER * N_CLASS, 32)
    )
    rng = np.random.default_rng(seed)
    leaf = rng.permutation(np.repeat(np.arange(N_SUPER * N_CLASS), per_leaf))
    feats = (leaf_c[leaf] + rng.standard_normal((len(leaf), 32))).astype(np.float32)
    images = 40 + rng.normal(0, 12, (len(leaf), 32, 32))
    for i, k in enumerate(leaf):
        a, b = divmod(int(k), N_CLASS)
        images[i, 10 * a + 1 : 10 * a + 11] += 100
        images[i, 10 * a + 1 : 10 * a + 11, 10 * b + 1 : 10 * b + 11] += 100
    node = [TREE.node_id(f"g{k // N_CLASS}c{k % N_CLASS}") for k in leaf]
    return feats, np.clip(images, 0, 255).astype(np.uint8), TREE.ancestors(node)


def toy_tree_data(n: int, seed: int = 0, n_sup: int = 2, per_sup: int = 3, d: int = 16):
    """Gaussian clusters per leaf of a K=3 tree: superclass centre + leaf offset + noise.

    Returns (features float32 (n, d), ancestor rows int32 (n, 3)): root, superclass, leaf.
    """
    rng = np.random.default_rng(seed)
    leaf = rng.integers(0, n_sup * per_sup, n)
    sup = leaf // per_sup
    X = (
        3.0 * rng.standard_normal((n_sup, d))[sup]
        + 1.5 * rng.standard_normal((n_sup * per_sup, d))[leaf]
        + rng.standard_normal((n, d))
    )
    anc = np.stack([np.zeros(n, int), 1 + sup, 1 + n_sup + leaf], axis=1).astype(np.int32)
    return X.astype(np.float32), anc


def train_and_queries(n: int = 480, n_queries: int = 80):
    """(X_train, anc_train, X_query, anc_query) from toy_tree_data: the first rows are queries."""
    X, anc = toy_tree_data(n)
    return X[n_queries:], anc[n_queries:], X[:n_queries], anc[:n_queries]


def toy_hierarchy(
    branch: tuple[int, int, int] = (4, 3, 3), n_per_leaf: int = 40, d: int = 64, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian clusters, one per leaf of a three-level tree (K = 4 with the root): a leaf's
    centre adds a coarse, a middle and a leaf offset of shrinking size, so leaves that share
    ancestors lie close. Returns (features float32, ancestor rows (N, 4)) in shuffled order."""
    rng = np.random.default_rng(seed)
    a, b, c = branch
    leaves = np.arange(a * b * c)
    offsets = [
        rng.standard_normal((m, d)) * s for m, s in ((a, 3.0), (a * b, 2.0), (a * b * c, 1.0))
    ]
    centres = offsets[0][leaves // (b * c)] + offsets[1][leaves // c] + offsets[2]
    label = np.repeat(leaves, n_per_leaf)
    X = centres[label] + rng.standard_normal((len(label), d))
    anc = np.stack(
        [np.zeros_like(label), 1 + label // (b * c), 1 + a + label // c, 1 + a + a * b + label],
        axis=1,
    )
    order = rng.permutation(len(label))
    return X[order].astype(np.float32), anc[order]


def deep_hasher(cls, **params):
    """A deep hasher from flat settings, as params.yaml's train section writes them: the loop's
    own go into its LoopSettings, the method's into its settings (alpha, eta, reduction, layout),
    the rest (work_dir) to the constructor (shdh.plan.all_methods.method_params does the same for
    a params file). The settings go as a mapping, as a saved params.json gives them: the hasher
    checks them, naming itself."""
    loop = {k: params.pop(k) for k in list(params) if k in LOOP_FIELDS}
    names = {f.name for f in dataclasses.fields(cls.settings_class())}
    settings = {k: params.pop(k) for k in list(params) if k in names}
    return cls(loop=LoopSettings(**loop), settings=settings, **params)


def model_params(hasher) -> dict:
    """The parameters that make a fitted model: get_params(), a deep method's loop less its
    runtime settings, which a saved model does not carry over (how its fit ran, not what it
    is)."""
    params = hasher.get_params()
    if "loop" not in params:
        return params
    loop = dataclasses.asdict(params["loop"])
    return {**params, "loop": {k: v for k, v in loop.items() if k not in RUNTIME_FIELDS}}
