"""The S-matrix step at scale, and dense S blocks against a numpy broadcast baseline.

Targets (2 cores):
- 1,000,000 items with a 7-level synthetic tree: the S-matrix step in at most 60 seconds with
  peak RSS at most 2 GB, with no N x N allocation (one would be 10^12 cells: a terabyte in int8);
- dense blocks (SMatrix.block: Eq. 3 as float32; SMatrix.shared_block: shared levels as int8)
  as fast as the obvious numpy broadcast over (A, B, K).

    python benchmarks/smatrix_scale.py [--n-items 1000000] [--branching 3] [--block 2000]
        [--repeats 3] [--quick]

The tree: a root and 6 levels below it, each node with --branching children (3: 1,093 nodes,
729 leaves). Items take a uniformly drawn leaf, and 10% of them a node at level 4-6 instead
(shallow leaves, so "no node" (-1) entries are exercised). The script writes what the pipeline's
`tree` and `prepare` steps would (tree.json + ancestors.npy, split.npz with 10% queries) and
times the real step function, shdh.steps.smatrix.smatrix (load and check, build_smatrix with the
2,000-item sample, atomic save), each run in a fresh child process (this script with --child)
whose ru_maxrss is the step's peak RSS, Python and numpy included. Blocks: rows and columns are
random items; ours and the baseline alternate, median of 7 each, and must agree. Not a test.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from provenance import at_most_row, commit_line, machine_line  # benchmarks/provenance.py

TARGET_SECONDS = 60.0
TARGET_GB = 2.0
LEVELS = 7


def synthetic_tree(branching: int):
    """A full tree of LEVELS levels (root included), every inner node with `branching` children;
    names are unique per level, as LabelTree requires."""
    from shdh.core.hierarchy import LabelTree

    names, parents = ["root"], [-1]
    frontier = [0]
    for level in range(2, LEVELS + 1):
        nxt = []
        for parent in frontier:
            for c in range(branching):
                names.append(f"L{level}n{len(names)}c{c}")
                parents.append(parent)
                nxt.append(len(names) - 1)
        frontier = nxt
    return LabelTree(tuple(names), tuple(parents))


def synthetic_items(tree, n_items: int, seed: int = 0) -> np.ndarray:
    """(n_items, K) ancestors: mostly leaves, 10% nodes at levels 4-6 (shallow leaves)."""
    rng = np.random.default_rng(seed)
    leaves = tree.nodes_at_level(LEVELS)
    shallow = np.concatenate([tree.nodes_at_level(k) for k in (4, 5, 6)])
    nodes = leaves[rng.integers(0, len(leaves), size=n_items)]
    pick = rng.random(n_items) < 0.1
    nodes[pick] = shallow[rng.integers(0, len(shallow), size=int(pick.sum()))]
    return tree.ancestors(nodes)


def write_inputs(root: Path, n_items: int, branching: int) -> tuple[Path, Path]:
    """What the tree and download steps leave for the smatrix step: tree dir and prepared dir."""
    from shdh.data.splits import make_split, save_split
    from shdh.steps import prepare
    from shdh.steps import tree as tree_step

    tree = synthetic_tree(branching)
    tree_dir, prepared = root / "tree", root / "prepared"
    tree_dir.mkdir()
    prepared.mkdir()
    tree.save(tree_dir / tree_step.TREE_FILE)
    np.save(tree_dir / tree_step.ANCESTORS_FILE, synthetic_items(tree, n_items))
    save_split(make_split(n_items, query_fraction=0.1, seed=0), prepared / prepare.SPLIT_FILE)
    return tree_dir, prepared


def child(args: argparse.Namespace) -> None:
    """One run of the step in its own process: prints seconds and peak RSS as JSON."""
    from shdh.steps import smatrix

    root = Path(args.child)
    start = time.perf_counter()
    smatrix.smatrix(
        root / "tree",
        root / "smatrix.npz",
        prepared_dir=root / "prepared",
        sample_size=2000,
        seed=0,
    )
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    print(json.dumps({"seconds": seconds, "peak": peak}))


def step_runs(root: Path, repeats: int) -> list[dict]:
    runs = []
    for _ in range(repeats):
        cmd = [sys.executable, __file__, "--child", str(root)]
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    return runs


# --- dense blocks ------------------------------------------------------------------------------


def baseline_similarity(a: np.ndarray, b: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Eq. 3 by broadcasting: (A, B, K-1) level matches, weighted sum, float32."""
    eq = (a[:, None, 1:] == b[None, :, 1:]) & (a[:, None, 1:] >= 0)
    return eq @ (2 * u[1:]).astype(np.float32) - np.float32(1)


def baseline_shared(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Shared non-root levels by broadcasting, int8."""
    eq = (a[:, None, 1:] == b[None, :, 1:]) & (a[:, None, 1:] >= 0)
    return eq.sum(axis=2, dtype=np.int8)


def median_interleaved(fns: dict[str, Callable[[], np.ndarray]], repeats: int) -> dict:
    """Median seconds of each fn, calls alternating so that load changes hit all of them."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for fn in fns.values():
        fn()  # warm-up
    for rep in range(repeats):
        names = list(fns) if rep % 2 == 0 else list(fns)[::-1]
        for name in names:
            start = time.perf_counter()
            fns[name]()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) for name, ts in times.items()}


def block_rows(args: argparse.Namespace) -> list[tuple[str, float, float]]:
    from shdh.core.smatrix import build_smatrix

    tree = synthetic_tree(args.branching)
    anc = synthetic_items(tree, max(args.n_items // 10, 2 * args.block), seed=1)
    s = build_smatrix(anc, tree.layer_weights(), sample_size=0)
    rng = np.random.default_rng(2)
    rows = rng.choice(len(anc), size=args.block, replace=False)
    cols = rng.choice(len(anc), size=args.block, replace=False)
    a, b = s.ancestors[rows], s.ancestors[cols]
    if not np.allclose(s.block(rows, cols), baseline_similarity(a, b, s.weights), atol=1e-6):
        raise SystemExit("SMatrix.block differs from the broadcast baseline")
    if not np.array_equal(s.shared_block(rows, cols), baseline_shared(a, b)):
        raise SystemExit("SMatrix.shared_block differs from the broadcast baseline")
    out = []
    for label, ours, base in [
        (
            "SMatrix.block (Eq. 3, float32)",
            lambda: s.block(rows, cols),
            lambda: baseline_similarity(a, b, s.weights),
        ),
        (
            "SMatrix.shared_block (r, int8)",
            lambda: s.shared_block(rows, cols),
            lambda: baseline_shared(a, b),
        ),
    ]:
        t = median_interleaved({"ours": ours, "base": base}, repeats=7)
        out.append((label, t["ours"], t["base"]))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-items", type=int, default=1_000_000)
    parser.add_argument("--branching", type=int, default=3)
    parser.add_argument("--block", type=int, default=2000, help="dense block side (items)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="100,000 items, 1,000-item blocks")
    args = parser.parse_args()
    if args.child:
        child(args)
        return
    if args.quick:
        args.n_items, args.block, args.repeats = 100_000, 1000, 1

    print(f"machine: {machine_line()}")
    print(f"{commit_line()}")
    n_nodes = sum(args.branching**k for k in range(LEVELS))
    print(
        f"S-matrix step: {args.n_items:,} items, {LEVELS}-level tree ({n_nodes:,} nodes), "
        f"median of {args.repeats} runs, each in a fresh process"
    )
    with tempfile.TemporaryDirectory(prefix="shdh-smatrix-") as tmp:
        write_inputs(Path(tmp), args.n_items, args.branching)
        runs = step_runs(Path(tmp), args.repeats)
    seconds = statistics.median(r["seconds"] for r in runs)
    peak_gb = max(r["peak"] for r in runs) / 1e9
    nxn_tb = args.n_items**2 / 1e12
    print(
        f"runs: {[round(r['seconds'], 2) for r in runs]} s; an N x N int8 matrix would be "
        f"{nxn_tb:,.3g} TB"
    )

    print("\n| S matrix | measured | target | ratio to target | result |")
    print("|---|---:|---:|---:|---|")
    print(at_most_row("step wall time", seconds, TARGET_SECONDS, "s"))
    print(at_most_row("step peak RSS", peak_gb, TARGET_GB, "GB"))
    for label, ours, base in block_rows(args):
        speed = base / ours
        verdict = "PASS" if speed >= 1.0 else "FAIL"
        print(
            f"| {label}, {args.block:,} x {args.block:,} | {ours * 1e3:.1f} ms (numpy "
            f"broadcast {base * 1e3:.1f} ms) | >= 1.0x baseline | {speed:.2f}x | {verdict} |"
        )


if __name__ == "__main__":
    main()
