"""Full evaluation of one method's codes: wall time and peak memory of shdh.core.metrics.evaluate.

Target (2 cores): full metrics (ACG/DCG/NDCG@100 with both ideals, WR@100/1000/5000,
the WR@n curve to 5,000 and the WR-by-radius curve) for 7,000 queries x 63,000 database items
in at most 30 seconds, with peak memory at most 4 GB.

    python benchmarks/evaluation_speed.py [--n-query 7000] [--n-db 63000] [--bits 64]
        [--codes clustered|random] [--repeats 3] [--quick]

This is what the pipeline's evaluate step does per method and code length (shdh.steps.score._score
calls metrics.evaluate with params.yaml's settings: n 100, wr_ns 100/1000/5000, curve_max
5000, one ranking thread per core). Data: Fashion-MNIST-H's tree (K = 4), leaf classes drawn
uniformly, 64-bit codes in the SHDH layout (3 weighted segments). "clustered" codes (default)
are a random prototype per leaf class with each bit flipped with probability 0.25, so that
neighbours and distance ties look like trained codes; "random" codes are the floor's.

Each setting runs in a fresh child process (this script with --child), so that its peak RSS
(ru_maxrss: imports, data and the evaluation) is its own; the child also reports the RSS it had
before evaluating. Two settings: the pipeline's (WR-by-radius curve over 1,000 queries,
params.yaml radius_queries) and the radius curve over all queries. After one warm-up on 200
queries, the median of --repeats full runs is reported. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import numpy as np
from provenance import at_most_row, commit_line, machine_line  # benchmarks/provenance.py

TARGET_SECONDS = 30.0
TARGET_GB = 4.0


def make_data(n_query: int, n_db: int, bits: int, codes: str, seed: int = 0) -> dict:
    """Seeded queries and database: ancestors from Fashion-MNIST-H's tree, packed codes."""
    from shdh.core import level_weights
    from shdh.data import fashion_mnist
    from shdh.ranking.exact import pack_codes

    tree = fashion_mnist.label_tree()
    rng = np.random.default_rng(seed)
    leaves = np.asarray(tree.leaves)
    leaf_of = rng.integers(0, len(leaves), size=n_query + n_db)
    anc = tree.ancestors(leaves[leaf_of])
    if codes == "clustered":
        prototypes = np.where(rng.random((len(leaves), bits)) < 0.5, -1, 1).astype(np.int8)
        flips = np.where(rng.random((n_query + n_db, bits)) < 0.25, -1, 1).astype(np.int8)
        signs = prototypes[leaf_of] * flips
    else:
        signs = np.where(rng.random((n_query + n_db, bits)) < 0.5, -1, 1).astype(np.int8)
    packed = pack_codes(signs)
    K = tree.height
    return {
        "q": packed[:n_query],
        "db": packed[n_query:],
        "q_anc": anc[:n_query],
        "db_anc": anc[n_query:],
        "sizes": level_weights.segment_sizes(bits, K),
        "weights": level_weights.segment_weights(K),
    }


def child(args: argparse.Namespace) -> None:
    """The measured part, in its own process: prints one JSON line with times and memory."""
    from shdh.core.metrics import evaluate
    from shdh.steps.score import eval_workers

    data = make_data(args.n_query, args.n_db, args.bits, args.codes)
    radius = None if args.radius_queries <= 0 else args.radius_queries

    def once(n_query: int) -> dict[str, float]:
        metrics, _ = evaluate(
            data["q"][:n_query],
            data["db"],
            data["q_anc"][:n_query],
            data["db_anc"],
            data["sizes"],
            data["weights"],
            n=100,
            wr_ns=(100, 1000, 5000),
            curve_max=5000,
            workers=eval_workers(None),
            radius_queries=radius,
        )
        return metrics

    rss_before = _rss_bytes()
    once(200)  # warm-up
    times = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        metrics = once(args.n_query)
        times.append(time.perf_counter() - start)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    print(json.dumps({"times": times, "peak": peak, "before": rss_before, "metrics": metrics}))


def _rss_bytes() -> int:
    import psutil

    return psutil.Process().memory_info().rss


def measure(args: argparse.Namespace, radius_queries: int) -> dict:
    cmd = [
        sys.executable,
        __file__,
        "--child",
        "--n-query",
        str(args.n_query),
        "--n-db",
        str(args.n_db),
        "--bits",
        str(args.bits),
        "--codes",
        args.codes,
        "--repeats",
        str(args.repeats),
        "--radius-queries",
        str(radius_queries),
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-query", type=int, default=7000)
    parser.add_argument("--n-db", type=int, default=63000)
    parser.add_argument("--bits", type=int, default=64)
    parser.add_argument("--codes", choices=["clustered", "random"], default="clustered")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--radius-queries", type=int, default=1000, help=argparse.SUPPRESS)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="1,000 queries x 9,000 items")
    args = parser.parse_args()
    if args.quick:
        args.n_query, args.n_db, args.repeats = 1000, 9000, 1
    if args.child:
        child(args)
        return

    print(f"machine: {machine_line()}")
    print(f"{commit_line()}")
    print(
        f"{args.n_query:,} queries x {args.n_db:,} items, {args.bits} bits, {args.codes} "
        f"codes, {os.cpu_count()} ranking threads, median of {args.repeats} after warm-up"
    )
    settings = [
        ("pipeline settings (radius curve over 1,000 queries)", min(1000, args.n_query)),
        ("radius curve over all queries", 0),
    ]
    print("\n| evaluation | measured | target | ratio to target | result |")
    print("|---|---:|---:|---:|---|")
    notes = []
    for label, radius in settings:
        res = measure(args, radius)
        seconds = statistics.median(res["times"])
        peak_gb = res["peak"] / 1e9
        print(at_most_row(f"{label}: wall time", seconds, TARGET_SECONDS, "s"))
        print(at_most_row(f"{label}: peak RSS", peak_gb, TARGET_GB, "GB"))
        notes.append(
            f"{label}: runs {[round(t, 2) for t in res['times']]} s, RSS before "
            f"evaluating {res['before'] / 1e9:.2f} GB, ndcg@100 "
            f"{res['metrics']['ndcg@100']:.4f}"
        )
    print("\n" + "\n".join(notes))


if __name__ == "__main__":
    main()
