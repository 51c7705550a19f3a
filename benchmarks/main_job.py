"""The README's two commands from a fresh clone: the main job's wall time and SHDH's NDCG@100
against the floor, or the test suite's wall time.

Targets: `make run` on a fresh clone completes in under 15 minutes on a 2-core CPU, and SHDH
at 64 bits reaches NDCG@100 >= 0.80 (database ideal); random codes score about 0.28. With
--test: `make test` within 10 minutes of a fresh clone, `make test-fast` within 3.

    python benchmarks/main_job.py [--keep] [--profile paper | --test]

Clones the committed HEAD into a temporary folder, runs `make run` there (venv from the lock
file, data, `dvc repro`), and prints the wall time of each phase and the metrics. With
--profile, `shdh profile apply NAME` switches the clone's params.yaml first (the `paper` profile:
the full protocol with 3 seeds, within 90 minutes on 2 cores). With --test, `make test` and then
`make test-fast` run instead of `make run` (their pytest summary lines are printed). Not a test:
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
    parser.add_argument("--test", action="store_true", help="time the test suite, not the job")
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
    metrics = {}
    if args.test:
        _time_the_tests(clone, env, phases)
    else:
        phases["dvc repro + table"] = timed(["make", "run"], clone, env)
        # The profile may write its results elsewhere (the paper profile: results/paper).
        params = yaml.safe_load((clone / "params.yaml").read_text())
        metrics = json.loads(
            (clone / params["evaluate"]["results_dir"] / "metrics.json").read_text()
        )
    print(
        f"\nmachine: {platform.machine()}, {os.cpu_count()} cores; commit {commit}; "
        f"profile {args.profile or 'default'}"
    )
    for name, seconds in phases.items():
        print(f"{name:40s} {seconds:7.1f} s")
    # test-fast is a second command, not part of a fresh clone's `make test`
    total = sum(seconds for name, seconds in phases.items() if name != "make test-fast")
    print(f"{'total' + (' of make test' if args.test else ''):40s} {total:7.1f} s")
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


def _time_the_tests(clone: Path, env: dict[str, str], phases: dict[str, float]) -> None:
    """`make test` (setup and data already done: what it adds is the browser and pytest), then
    `make test-fast`; each pytest's summary line is printed as it ends."""
    for target in ("test", "test-fast"):
        start = time.perf_counter()
        out = subprocess.run(
            ["make", target], cwd=clone, env=env, text=True, capture_output=True, check=False
        )
        phases[f"make {target}"] = time.perf_counter() - start
        summary = [line for line in out.stdout.splitlines() if " in " in line and "==" in line]
        tail = summary[-1] if summary else out.stdout[-2000:]
        print(f"make {target}: exit {out.returncode}; {tail}")


if __name__ == "__main__":
    main()
