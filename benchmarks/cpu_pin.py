"""What the CPU pin (shdh.runtime.instruction_set) costs: the same work pinned, with the pin off,
and pinned with MKL on its AVX2 branch instead of COMPATIBLE (what the pin held before it held the
vendor too).

    python benchmarks/cpu_pin.py [--repeats 3]

Each mode runs in a fresh process (the pin must be set before numpy and torch load), on
synthetic data of the pipeline's shapes: one epoch of SHDH on an eighth-width CNN-F (the default
profile's deep fits), GIST-512 features (the features stage), ITQ and KSH fits on 512-D features
(the shallow baselines). Prints the best of `repeats` times per task and mode as a markdown
table for docs/benchmarks.md, with this machine's CPU and instruction set. Times are the
process's CPU seconds (every thread's), not wall time, so that other work on the machine moves
them less. The off mode may take wider kernels on an AVX-512 CPU; the COMPATIBLE branch may cost
wherever torch's matrix products or MKL's exp and log carry weight. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys

WORK = r"""
import json, os, sys, time
from shdh.runtime.instruction_set import pin_cpu
pin_cpu()
os.environ.update(json.loads(sys.argv[1]))  # a mode's changes to the pin, before torch loads
import numpy as np, torch
from shdh.features.gist import gist_features
from shdh.hashers import hasher_class
from shdh.hashers.supervision import PairSimilarity
from shdh.training.loop_settings import LoopSettings

rng = np.random.default_rng(0)
n = 1024
leaf = rng.integers(0, 10, n)
anc = np.stack([np.zeros(n, int), 1 + leaf // 5, 3 + leaf], axis=1)
u = [0.0, 2 / 3, 1 / 3]
images = rng.integers(0, 255, size=(n, 28, 28), dtype=np.uint8)
features = rng.normal(size=(8 * n, 512)).astype(np.float32)
anc_f = np.tile(anc, (8, 1))

def timed(fn):  # CPU seconds of the whole process, all threads: what a busy machine inflates least
    start = time.process_time(); fn(); return time.process_time() - start

def shdh():
    loop = LoopSettings(width=1 / 8, epochs=1, batch_size=128, device="cpu")
    hasher_class("shdh")(n_bits=32, loop=loop, seed=0).fit(
        images, PairSimilarity(anc, u, "hierarchical"))

def fit(name, **budget):
    cls = hasher_class(name)
    return lambda: cls(n_bits=32, seed=0, **budget).fit(
        features, PairSimilarity(anc_f, u, cls.supervision or "label"))

tasks = {
    "SHDH, 1 epoch of 1,024 images (1/8 width)": shdh,
    "GIST-512 of 1,024 images": lambda: gist_features(images),
    "ITQ, 8,192 x 512": fit("itq"),
    "KSH, 8,192 x 512 (300 anchors, 2,000 labelled)": fit("ksh", n_anchors=300,
                                                            n_labelled=2000),
}
print(json.dumps({name: timed(fn) for name, fn in tasks.items()}))
"""


# mode -> (SHDH_CPU_PIN, variables set after the pin)
MODES = {
    "pinned": ("avx2", {}),
    "MKL AVX2 branch": ("avx2", {"MKL_CBWR": "AVX2,STRICT"}),
    "off": ("off", {}),
}


def run_once(mode: str) -> dict[str, float]:
    setting, changes = MODES[mode]
    env = {**os.environ, "SHDH_CPU_PIN": setting}
    out = subprocess.run(
        [sys.executable, "-c", WORK, json.dumps(changes)],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return json.loads(out.stdout.splitlines()[-1])


def cpu_line() -> str:
    from shdh.runtime.instruction_set import host_isa

    model = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            model = next(line.split(":", 1)[1].strip() for line in f if "model name" in line)
    except (OSError, StopIteration):
        pass
    return f"{model}, {os.cpu_count()} CPUs, {host_isa()}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    best: dict[str, dict[str, float]] = {mode: {} for mode in MODES}
    for _ in range(args.repeats):
        for mode in best:  # alternated, so that a busy moment hits every mode alike
            for task, seconds in run_once(mode).items():
                best[mode][task] = min(seconds, best[mode].get(task, float("inf")))
    print(f"CPU: {cpu_line()}; best of {args.repeats}\n")
    print("| task | pinned, CPU s | MKL AVX2 branch, CPU s | off, CPU s | pinned / off |")
    print("|---|---:|---:|---:|---:|")
    for task, pinned in best["pinned"].items():
        avx2, off = best["MKL AVX2 branch"][task], best["off"][task]
        print(f"| {task} | {pinned:.2f} | {avx2:.2f} | {off:.2f} | {pinned / off:.2f} |")


if __name__ == "__main__":
    main()
