"""What a rerun of `shdh evaluate` costs with its caches of codes and scores
(shdh.steps.codes_cache, shdh.steps.score_cache).

    python benchmarks/evaluate_rerun.py [--params params.yaml] [--changed shdh dpsh]

Needs the artifacts that evaluate reads (after `make run`, or `dvc pull`). Runs `shdh evaluate`
three times, each in a child process writing into a temporary results folder (never the
project's results/), with caches and an MLflow store of its own:

1. cold: empty caches, which is what every run cost before them (plus storing entries);
2. warm: nothing changed, as when a baseline's setting, the report or the alpha sweep brought
   evaluate back (a changed baseline's own code set is encoded and ranked again: seconds);
3. an experiment: the --changed methods' entries (their models' codes, and those codes'
   scores) are removed first, so that those are encoded and ranked again, as after
   `dvc exp run -S train.epochs=5`, which retrains the deep fits.

The three metrics.json must be byte-identical, or the script fails. Prints a markdown table with
the machine and the commit. Not a test.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml
from provenance import commit_line, machine_line  # benchmarks/provenance.py

from shdh.core.codes_file import CODES_DIR, load_codes
from shdh.hashers import load_hasher
from shdh.plan.all_methods import planned_fits
from shdh.reporting.report import METRICS_FILE
from shdh.runtime.instruction_set import pin_cpu
from shdh.steps import codes_cache, score_cache
from shdh.steps.score import scoring_settings
from shdh.steps.split_inputs import load_split


def evaluate_once(params: Path, env: dict[str, str]) -> float:
    """Seconds of one `shdh evaluate` in a child process."""
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "shdh.cli", "evaluate", "--params", str(params)],
        env=env,
        check=True,
        stdout=subprocess.DEVNULL,
    )
    return time.perf_counter() - start


def forget(results: Path, methods: list[str], eval_params: dict) -> int:
    """Remove the cache entries of these methods' codes files; how many were removed."""
    removed = 0
    for method in methods:
        for path in sorted((results / CODES_DIR).glob(f"{method}-*.npz")):
            codes = load_codes(path)
            settings = scoring_settings(eval_params, len(codes.db_ids))
            entry = score_cache.cache_dir() / f"{score_cache.entry_key(codes, settings)}.npz"
            removed += entry.is_file()
            entry.unlink(missing_ok=True)
    return removed


def forget_codes(params: dict, methods: list[str]) -> int:
    """Remove the codes-cache entries of these methods' models (queries and database), so that
    they are encoded again, as after a retraining; how many were removed."""
    split = load_split(
        params["data"]["prepared_dir"], params["smatrix"]["out"], params["features"]["out"]
    )
    keys, removed = codes_cache.RowKeys(split.inputs), 0
    for plan in planned_fits(params):
        if plan.method not in methods:
            continue
        hasher = load_hasher(plan.hasher_dir)
        model = codes_cache.model_key(hasher)
        for rows in (split.q_idx, split.db_idx):
            key = codes_cache.entry_key(hasher, keys(hasher.input_kind, rows), model)
            entry = codes_cache.cache_dir() / f"{key}.npz"
            removed += entry.is_file()
            entry.unlink(missing_ok=True)
    return removed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=Path, default=Path("params.yaml"))
    parser.add_argument("--changed", nargs="+", default=["shdh", "dpsh"])
    args = parser.parse_args()
    pin_cpu(reexec=True)  # as `shdh evaluate` runs: the codes cache keys name the pin
    params = yaml.safe_load(args.params.read_text())
    with tempfile.TemporaryDirectory(prefix="evaluate-rerun-") as tmp:
        work = Path(tmp)
        results = work / "results"
        params["evaluate"].update(results_dir=str(results), report=str(work / "report.md"))
        own = work / "params.yaml"
        own.write_text(yaml.safe_dump(params))
        os.environ["SHDH_CACHE_DIR"] = str(work / "cache")
        env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{work / 'mlflow.db'}"}
        env.pop("SHDH_SCORE_CACHE", None)
        cold = evaluate_once(own, env)
        written = (results / METRICS_FILE).read_bytes()
        n_sets = len(list((results / CODES_DIR).glob("*.npz")))
        n_models = len(planned_fits(params))
        warm = evaluate_once(own, env)
        same = (results / METRICS_FILE).read_bytes() == written
        removed = forget(results, args.changed, params["evaluate"])
        encoded = forget_codes(params, args.changed) // 2
        changed = evaluate_once(own, env)
        same = same and (results / METRICS_FILE).read_bytes() == written
    if not same:
        raise SystemExit("FAIL: a rerun's metrics.json differs from the cold run's")
    print(f"{machine_line()}\n{commit_line()}\n")
    print("| run of `shdh evaluate` | models encoded | code sets ranked | seconds |")
    print("|---|---:|---:|---:|")
    print(f"| cold (empty caches) | {n_models} | {n_sets} of {n_sets} | {cold:.0f} |")
    print(f"| warm (nothing changed) | 0 | 0 of {n_sets} | {warm:.0f} |")
    label = ", ".join(args.changed)
    print(f"| {label} changed | {encoded} | {removed} of {n_sets} | {changed:.0f} |")
    print("\nmetrics.json: byte-identical in all three runs")


if __name__ == "__main__":
    main()
