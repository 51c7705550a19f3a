"""Two GPU visits' deep fits side by side, fit for fit: docs/results-gpu.md's "Run to run" table.

    python benchmarks/run_to_run.py [--first results/gpu] [--second results/gpu/rerun-2026-11-28]

A GPU fit is not bit-reproducible, so the same seed trained twice gives two numbers; this prints
database-ideal NDCG@100 of each (method, bits, seed) on both visits, each row's mean and sample
standard deviation over the seeds, the epochs each fit ran, and per method the mean and largest
change of one seed. The first visit's scores are `shdh evaluate`'s metrics_by_seed.json; the
second's, metrics_by_fit.json (`shdh metrics` of each codes file, keyed by fit name), since its
codes were scored against the same split outside the pipeline. Each visit's fit records (fits/)
give the epochs. Not a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

METHODS = ("shdh", "dpsh", "oracle")
BITS = (32, 48, 64)
SEEDS = (0, 1, 2)
METRIC = "ndcg@100"


def first_visit(folder: Path) -> dict[str, float]:
    """fit name -> NDCG@100, from evaluate's metrics_by_seed.json (method -> bits -> seed)."""
    by_seed = json.loads((folder / "metrics_by_seed.json").read_text())
    return {
        f"{m}-{b}-seed{s}": by_seed[m][str(b)][str(s)][METRIC]
        for m in METHODS
        for b in BITS
        for s in SEEDS
    }


def second_visit(folder: Path) -> dict[str, float]:
    """fit name -> NDCG@100, from metrics_by_fit.json (fit name -> `shdh metrics` output)."""
    by_fit = json.loads((folder / "metrics_by_fit.json").read_text())
    return {name: metrics[METRIC] for name, metrics in by_fit.items()}


def epochs(folder: Path, name: str) -> int:
    return len(json.loads((folder / "fits" / f"{name}.json").read_text())["history"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--first", type=Path, default=Path("results/gpu"))
    parser.add_argument("--second", type=Path, default=Path("results/gpu/rerun-2026-11-28"))
    args = parser.parse_args()
    one, two = first_visit(args.first), second_visit(args.second)
    print(
        "| method | bits | seed 0 | seed 1 | seed 2 | mean ± sd, first | mean ± sd, second "
        "| epochs (first/second), seeds 0-2 |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---|")
    changes: dict[str, list[float]] = {}
    for method in METHODS:
        for bits in BITS:
            names = [f"{method}-{bits}-seed{s}" for s in SEEDS]
            a, b = [one[n] for n in names], [two[n] for n in names]
            changes.setdefault(method, []).extend(y - x for x, y in zip(a, b, strict=True))
            pairs = " | ".join(f"{x:.4f} / {y:.4f}" for x, y in zip(a, b, strict=True))
            runs = " ".join(f"{epochs(args.first, n)}/{epochs(args.second, n)}" for n in names)
            print(
                f"| {method.upper()} | {bits} | {pairs} | {_mean_sd(a)} | {_mean_sd(b)} | {runs} |"
            )
    print()
    for method, delta in changes.items():
        size = [abs(d) for d in delta]
        print(
            f"{method.upper()}: one seed moved by {statistics.fmean(size):.4f} on average, "
            f"{max(size):.4f} at most"
        )


def _mean_sd(values: list[float]) -> str:
    return f"{statistics.fmean(values):.4f} ± {statistics.stdev(values):.4f}"


if __name__ == "__main__":
    main()
