"""The README main job from a fresh clone: wall time and SHDH's NDCG@100 against the floor.

Issue target: `make run` on a fresh clone completes in under 15 minutes on a 2-core CPU, and SHDH
at 64 bits reaches NDCG@100 >= 0.80 (database ideal); random codes score about 0.28.

    python benchmarks/main_job.py [--keep] [--profile paper]

Clones the committed HEAD into a temporary folder, runs `make run` there (venv from the lock
file, data, `dvc repro`), and prints the wall time of each phase and the metrics. With
--profile, `shdh profile apply NAME` switches the clone's params.yaml first (the `paper` profile:
the full protocol with 3 seeds, within 90 minutes on 2 cores). Not a test:
it takes minutes and its numbers depend on the machine; record them in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]


def timed(cmd: list[str], cwd: Path, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(cmd, cwd=cwd, env=env, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keep", action="store_true", help="keep the clone for inspection")
    parser.add_argument("--profile", help="run this profile instead of params.yaml's default")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="shdh-main-job-"))
    clone = workdir / "shdh"
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "MLFLOW_TRACKING_URI")}
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"],
        cwd=REPO,
        text=True,
        capture_output=True,
        check=True,
    ).stdout.strip()
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    phases = {
        "setup (venv from requirements.lock)": timed(["make", "setup"], clone, env),
        "data (fetch + verify)": timed(["make", "data"], clone, env),
    }
    if args.profile:
        shdh = str(clone / ".venv" / "bin" / "shdh")
        phases["profile apply"] = timed([shdh, "profile", "apply", args.profile], clone, env)
    phases["dvc repro + table"] = timed(["make", "run"], clone, env)
    # The profile may write its results elsewhere (the paper profile: results/paper).
    results_dir = yaml.safe_load((clone / "params.yaml").read_text())["evaluate"]["results_dir"]
    metrics = json.loads((clone / results_dir / "metrics.json").read_text())
    print(
        f"\nmachine: {platform.machine()}, {os.cpu_count()} cores; commit {commit}; "
        f"profile {args.profile or 'default'}"
    )
    for name, seconds in phases.items():
        print(f"{name:40s} {seconds:7.1f} s")
    print(f"{'total':40s} {sum(phases.values()):7.1f} s")
    for method, by_bits in metrics.items():
        for bits, row in by_bits.items():
            spread = f" ± {row['ndcg@100_sd']:.4f}" if "ndcg@100_sd" in row else ""
            print(
                f"{method:10s} {bits:>3s} bits  NDCG@100 {row['ndcg@100']:.4f}{spread}  "
                f"ACG@100 {row['acg@100']:.4f}  WR@1000 {row['wr@1000']:.4f}"
            )
    if args.keep:
        print(f"clone kept in {clone}")
    else:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
