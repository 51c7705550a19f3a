"""The smatrix step: the compact S artifact of Eq. 3 (s_ij by shared depth, never N x N) and a
dense block for a sample of the training pool."""

from __future__ import annotations

import logging
from pathlib import Path

from shdh.runtime.atomic import check_writable
from shdh.steps.prepare import SPLIT_FILE
from shdh.steps.tree import load_tree

log = logging.getLogger(__name__)


def smatrix(
    tree_dir: str | Path,
    out: str | Path,
    *,
    prepared_dir: str | Path,
    sample_size: int = 2000,
    seed: int = 0,
) -> Path:
    """The compact S artifact (Eq. 3 by shared depth) plus a dense block for a sample.

    Works alike for (N, K) ancestors and multi-label (N, K, M) ancestor sets. The sample comes
    from the database (the training pool), never from the queries.
    """
    from shdh.core.smatrix import build_smatrix
    from shdh.data.splits import load_split

    check_writable(out, "smatrix.out")
    label_tree, ancestors = load_tree(tree_dir)
    split = load_split(Path(prepared_dir) / SPLIT_FILE, n_items=len(ancestors))
    s = build_smatrix(
        ancestors,
        label_tree.layer_weights(),
        sample_size=sample_size,
        seed=seed,
        pool=split.db_idx,
    )
    s.save(out)
    log.info(
        "wrote %s: N=%d, K=%d, sample %d", out, s.n_items, label_tree.height, len(s.sample_idx)
    )
    return Path(out)


def load_smatrix(path: str | Path):
    from shdh.core.smatrix import SMatrix

    return SMatrix.load(path)
