"""The README's two commands from a fresh clone: the main job's wall time and SHDH's NDCG@100
against the floor, or the test suite's wall time.

Targets: `make run` on a fresh clone prints its table within 8 minutes on a 2-core CPU, and
SHDH at 64 bits reaches NDCG@100 >= 0.80 (database ideal); random codes score about 0.28. With
--test: `make test` within 10 minutes of a fresh clone, `make test-fast` within 3.

    python benchmarks/main_job.py [--keep] [--profile paper | --test]

Clones the committed HEAD into a temporary folder, runs `make run` there (venv from the lock
file, data, `dvc repro`), and prints the wall time of each phase, each DVC stage's wall time
beside what its fits and its encoding took (the rest is start-up, loading, scoring and
logging), and the metrics. With
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
import re
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


STAGE = re.compile(r"Running stage '([^']+)'")
FITTED = re.compile(r"INFO shdh\.steps\.fit: (\S+): fitted in ([0-9.]+) s")


def timed_stages(cmd: list[str], cwd: Path, env: dict[str, str]) -> dict[str, dict[str, float]]:
    """Run `make run`, echoing its output, and time each DVC stage from its 'Running stage'
    line to the next one's (the last stage: to the end, the table included), with the seconds
    its fits took by their own clocks: what is left of a stage is start-up, loading, encoding,
    scoring and logging."""
    stages: dict[str, dict[str, float]] = {}
    current = None
    proc = subprocess.Popen(
        cmd, cwd=cwd, env=env, text=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    assert proc.stdout is not None
    for line in proc.stdout:
        print(line, end="", flush=True)
        now = time.perf_counter()
        if (stage := STAGE.search(line)) and stage.group(1) != current:
            if current is not None:
                stages[current]["wall"] = now - stages[current]["start"]
            current = stage.group(1)
            stages[current] = {"start": now, "fits": 0.0, "n_fits": 0}
        elif (fitted := FITTED.search(line)) and current is not None:
            stages[current]["fits"] += float(fitted.group(2))
            stages[current]["n_fits"] += 1
    if proc.wait() != 0:
        raise subprocess.CalledProcessError(proc.returncode, cmd)
    if current is not None:
        stages[current]["wall"] = time.perf_counter() - stages[current]["start"]
    return stages


def print_stages(stages: dict[str, dict[str, float]], timings: dict) -> None:
    """Each stage's wall time beside the fits' and the encoding's own seconds
    (results/timings.json: evaluate encodes every row), and the rest."""
    encode = sum(row["encode_seconds"] for rows in timings.values() for row in rows.values())
    print(f"\n{'stage':14s} {'wall':>8s} {'fits':>12s} {'encoding':>9s} {'the rest':>9s}")
    for name, stage in stages.items():
        enc = encode if name == "evaluate" else 0.0
        fits = f"{stage['fits']:.1f} s ({int(stage['n_fits'])})" if stage["n_fits"] else "-"
        rest = stage["wall"] - stage["fits"] - enc
        print(
            f"{name:14s} {stage['wall']:7.1f}s {fits:>12s} "
            f"{(f'{enc:.1f} s' if enc else '-'):>9s} {rest:8.1f}s"
        )


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
    metrics: dict = {}
    stages: dict[str, dict[str, float]] = {}
    if args.test:
        _time_the_tests(clone, env, phases)
    else:
        started = time.perf_counter()
        stages = timed_stages(["make", "run"], clone, env)
        phases["dvc repro + table"] = time.perf_counter() - started
        # The profile may write its results elsewhere (the paper profile: results/paper).
        params = yaml.safe_load((clone / "params.yaml").read_text())
        results = clone / params["evaluate"]["results_dir"]
        metrics = json.loads((results / "metrics.json").read_text())
    print(
        f"\nmachine: {platform.machine()}, {os.cpu_count()} cores; commit {commit}; "
        f"profile {args.profile or 'default'}"
    )
    for name, seconds in phases.items():
        print(f"{name:40s} {seconds:7.1f} s")
    # test-fast is a second command, not part of a fresh clone's `make test`
    total = sum(seconds for name, seconds in phases.items() if name != "make test-fast")
    print(f"{'total' + (' of make test' if args.test else ''):40s} {total:7.1f} s")
    if stages:
        print_stages(stages, json.loads((results / "timings.json").read_text()))
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
