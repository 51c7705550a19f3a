"""The score step beyond encoding, code set by code set: the default profile's 30 rows, timed
per row and per phase.

Target (issue 54, 2 cores): the default profile's 30 code sets (27 fits and the random floor at
32, 48 and 64 bits; 7,000 queries x 63,000 items) scored in at most 60 seconds beyond encoding,
every metric as before to the last digit.

    python benchmarks/scoring_speed.py [--codes results/codes] [--params params.yaml]
        [--only NAME ...] [--quick]

It needs the codes files `shdh evaluate` writes (results/codes/*.npz, after `make run` or `dvc
repro`) and scores each as the score step does it, through shdh.steps.score._score itself: the
codes file written, the metrics computed (shdh.core.metrics.evaluate with params.yaml's evaluate
settings and one ranking thread per CPU), the method's MLflow run logged with its codes file and
its WR@n plot. The score and codes caches are off and the MLflow store is a temporary one, so
that the work is measured, not a cache. Phases:
- rank: evaluate's ranking pass over every query (shdh.core.metric_kernel), the sum over the
  pool's threads (so it can exceed the wall time);
- list metrics: the rest of evaluate in the main thread (ACG, DCG, NDCG of the top n; the sums);
- evaluate: its whole wall time; codes file: writing it; run: the plot and the MLflow logging;
- row: the wall time of the whole row.
Per-phase figures come from wrapping those functions; an older checkout without them (the
scorer before the one pass) reports evaluate and row only. --quick scores the three random rows.
Not a test.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import os
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path

import yaml
from provenance import at_most_row, commit_line, machine_line  # benchmarks/provenance.py

TARGET_SECONDS = 60.0
PHASES = ("rank", "list metrics", "evaluate", "codes file", "run", "row")


class Clock:
    """Seconds per phase, added up over calls (and threads) until read."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.lock = threading.Lock()

    def wrap(self, owner: object, name: str, phase: str) -> None:
        """Time every call of owner.name as `phase` (skipped where owner has no such name)."""
        inner = getattr(owner, name, None)
        if inner is None:
            return

        @functools.wraps(inner)
        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                with self.lock:
                    self.seconds[phase] += time.perf_counter() - start

        setattr(owner, name, timed)

    def take(self) -> dict[str, float]:
        with self.lock:
            out, self.seconds = dict(self.seconds), defaultdict(float)
        return out


def instrument(clock: Clock) -> None:
    from shdh.core import codes_file, metrics
    from shdh.steps import score

    ranking = getattr(metrics, "_Pass", None)  # the one pass (absent before it)
    if ranking is not None:
        clock.wrap(ranking, "rank", "rank")
        clock.wrap(metrics._Sums, "add", "list metrics")
    clock.wrap(codes_file, "evaluate", "evaluate")  # what evaluate_codes calls
    clock.wrap(score, "save_codes", "codes file")
    clock.wrap(score, "_run_artifacts", "run")
    clock.wrap(score, "_new_method_run", "run")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--codes", default="results/codes")
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--only", nargs="+", default=None, help="score these code sets alone")
    parser.add_argument("--quick", action="store_true", help="the three random rows")
    args = parser.parse_args()
    paths = sorted(Path(args.codes).glob("*.npz"))
    if args.only:
        paths = [p for p in paths if p.stem in args.only]
    elif args.quick:
        paths = [p for p in paths if p.stem.startswith("random-")]
    if not paths:
        sys.exit(f"no codes files in {args.codes}: run `make run` (or `shdh evaluate`) first")
    work = Path(tempfile.mkdtemp(prefix="scoring-speed-"))
    os.environ.update(SHDH_SCORE_CACHE="0", SHDH_CODES_CACHE="0", SHDH_CACHE_DIR=str(work))
    os.environ["MLFLOW_TRACKING_URI"] = f"sqlite:///{work / 'mlflow.db'}"
    params = yaml.safe_load(Path(args.params).read_text())
    eval_params = {**params["evaluate"], "report": None}
    print(f"machine: {machine_line()}")
    print(commit_line())
    print(cpu_line())
    print(
        f"compiling the ranking pass (first call; cached on disk after): {warm_up(paths[0]):.1f} s"
    )
    clock = Clock()
    instrument(clock)
    rows = [score_row(path, eval_params, work, clock) for path in paths]
    print_table(rows, len(paths))


def warm_up(path: Path) -> float:
    """Seconds of one evaluate over a few queries: the compiled kernels' first call, which
    compiles them (or loads them from numba's cache), apart from the rows' figures."""
    from shdh.core.codes_file import evaluate_codes, load_codes

    codes = load_codes(path)
    few = dataclasses.replace(
        codes, query_codes=codes.query_codes[:8], query_ancestors=codes.query_ancestors[:8]
    )
    start = time.perf_counter()
    evaluate_codes(few, map_depths=(1000, None), mahp_depths=(2500,), radius_queries=2)
    return time.perf_counter() - start


def score_row(path: Path, eval_params: dict, work: Path, clock: Clock) -> dict:
    """One code set scored as the score step does (shdh.steps.score._score), timed."""
    from shdh.core.codes_file import load_codes
    from shdh.steps import score

    codes = load_codes(path)
    method, bits = path.stem.split("-")[0], int(path.stem.split("-")[1])
    clock.take()
    start = time.perf_counter()
    with open(os.devnull, "w") as null, contextlib.redirect_stderr(null):  # MLflow's warnings
        score._score(
            codes,
            method,
            bits,
            path.stem,
            0,
            None,
            results_dir=work / "results",
            eval_params=eval_params,
            tags=None,
            parent_run_id=None,
        )
    seconds = {**clock.take(), "row": time.perf_counter() - start}
    cells = " | ".join(f"{seconds.get(p, float('nan')):.2f}" for p in PHASES)
    print(f"| {path.stem} | {cells} |", flush=True)
    return seconds


def print_table(rows: list[dict], n_rows: int) -> None:
    print("\n| code set | " + " | ".join(f"{p} s" for p in PHASES) + " |")
    print("|---|" + "---:|" * len(PHASES))
    totals = {p: sum(r.get(p, 0.0) for r in rows) for p in PHASES}
    print("| **all** | " + " | ".join(f"**{totals[p]:.1f}**" for p in PHASES) + " |")
    print("\n| figure | measured | target | ratio to target | result |")
    print("|---|---:|---:|---:|---|")
    print(
        at_most_row(
            f"{n_rows} code sets scored, beyond encoding", totals["row"], TARGET_SECONDS, "s"
        )
    )


def cpu_line() -> str:
    """The CPU's vendor and model, and whether it has AVX-512 (the figures depend on both)."""
    info = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    fields: dict[str, str] = {}
    for line in info.splitlines():
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    avx512 = "avx512f" in fields.get("flags", "").split()
    return (
        f"CPU: {fields.get('vendor_id', '?')}, {fields.get('model name', '?')}, "
        f"{os.cpu_count()} CPUs, avx512f {'yes' if avx512 else 'no'}"
    )


if __name__ == "__main__":
    main()
