"""Exact top-100 ranking speed: shdh.ranking.exact against faiss IndexBinaryFlat, side by side.

Target (2 cores): queries per second for exact top-100 retrieval over 1,000,000 random
64-bit database codes, 1,000 queries; our plain Hamming >= 1.0x faiss, our weighted Hamming
(the 3-segment Fashion-MNIST-H layout, integer weights 3/2/1) >= 0.5x faiss.

    python benchmarks/ranking_speed.py [--n-db 1000000] [--n-query 1000] [--top 100]
        [--threads N] [--repeats 3] [--quick]

Why side by side: faiss's binary flat index is the reference exact Hamming search, and a ratio
measured in one run on one machine survives a shared or slower machine where absolute numbers
do not. The three sides run in rotating order within each repeat, so load changes hit all of
them; the figure is the median over repeats. faiss gets the same number of OpenMP threads as
our ranking gets worker threads. Building the faiss index (add) is not timed; our per-call
preparation (the word-major copy of the database) is. The top-100 distances of our plain
ranking must equal faiss's (ties may pick other items: faiss does not break ties by index), or
the script fails. Not a test: the numbers depend on the machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable

import numpy as np
from provenance import commit_line, machine_line  # benchmarks/provenance.py

from shdh.core import level_weights
from shdh.ranking.exact import rank_with_distances


def random_packed(n: int, n_bytes: int, seed: int) -> np.ndarray:
    """n random codes, packed (uint8, n_bytes each): every bit fair and independent."""
    return np.random.default_rng(seed).integers(0, 256, size=(n, n_bytes), dtype=np.uint8)


def faiss_search(db: np.ndarray, n_bits: int, threads: int) -> Callable[[np.ndarray, int], tuple]:
    """An IndexBinaryFlat holding db; returns search(q, k) -> (distances, indices)."""
    import faiss

    faiss.omp_set_num_threads(threads)
    index = faiss.IndexBinaryFlat(n_bits)
    index.add(db)
    return lambda q, k: index.search(q, k)


def timed(fn: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def run(args: argparse.Namespace) -> dict[str, float]:
    n_bytes = args.bits // 8
    db = random_packed(args.n_db, n_bytes, seed=0)
    q = random_packed(args.n_query, n_bytes, seed=1)
    sizes = level_weights.segment_sizes(args.bits, args.levels)  # [21, 21, 22] for K = 4
    weights = level_weights.segment_integer_weights(args.levels).tolist()  # [3, 2, 1]
    search = faiss_search(db, args.bits, args.threads)
    sides: dict[str, Callable[[np.ndarray], tuple]] = {
        "faiss": lambda qs: search(qs, args.top),
        "plain": lambda qs: rank_with_distances(
            qs, db, [args.bits], [1], top_n=args.top, workers=args.threads
        ),
        "weighted": lambda qs: rank_with_distances(
            qs, db, sizes, weights, top_n=args.top, workers=args.threads
        ),
    }
    for fn in sides.values():  # warm-up: first-call costs, page faults, thread pools
        fn(q[: max(1, args.n_query // 20)])
    times: dict[str, list[float]] = {name: [] for name in sides}
    names = list(sides)
    for rep in range(args.repeats):
        for name in names[rep % 3 :] + names[: rep % 3]:  # rotate the order
            seconds, out = timed(lambda fn=sides[name]: fn(q))
            times[name].append(seconds)
            if name == "faiss":
                faiss_d = out[0]
            elif name == "plain":
                plain_d = out[1]
    if not np.array_equal(np.asarray(faiss_d, dtype=np.int64), plain_d):
        raise SystemExit("plain Hamming top-n distances differ from faiss's: not the same search")
    print(f"\nweighted layout: segments {sizes}, integer weights {weights}")
    print(
        "seconds per run of all queries:", {k: [round(t, 3) for t in v] for k, v in times.items()}
    )
    return {name: args.n_query / statistics.median(ts) for name, ts in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n-db", type=int, default=1_000_000)
    parser.add_argument("--n-query", type=int, default=1000)
    parser.add_argument("--top", type=int, default=100)
    parser.add_argument("--bits", type=int, default=64)
    parser.add_argument(
        "--levels", type=int, default=4, help="tree height K of the weighted layout"
    )
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="100,000 codes, 200 queries")
    args = parser.parse_args()
    if args.quick:
        args.n_db, args.n_query, args.repeats = 100_000, 200, 2
    if args.bits % 8:
        parser.error("--bits must be a multiple of 8 (faiss binary codes are whole bytes)")

    print(f"machine: {machine_line()}")
    print(f"{commit_line()}")
    print(
        f"exact top-{args.top}, {args.n_db:,} random {args.bits}-bit codes, {args.n_query:,} "
        f"queries, {args.threads} threads, median of {args.repeats}"
    )
    qps = run(args)
    print("\n| ranking | queries/s | target | ratio to faiss | result |")
    print("|---|---:|---:|---:|---|")
    print(f"| faiss IndexBinaryFlat | {qps['faiss']:,.0f} | - | 1.00 | - |")
    for name, label, target in [
        ("plain", "shdh plain Hamming", 1.0),
        ("weighted", "shdh weighted Hamming", 0.5),
    ]:
        ratio = qps[name] / qps["faiss"]
        verdict = "PASS" if ratio >= target else "FAIL"
        print(f"| {label} | {qps[name]:,.0f} | >= {target:.1f}x faiss | {ratio:.2f} | {verdict} |")


if __name__ == "__main__":
    main()
