"""Fit and encode time of every shallow method, and the GIST features they read.

Issue target: on 2 cores, each shallow method fits in no more than 2 minutes on the default
profile, and GIST-512 for all 70,000 Fashion-MNIST images takes no more than 3 minutes.

    python benchmarks/fit_times.py [--prepared artifacts/prepared] [--smatrix ...]
        [--n-train N] [--bits 32 48 64] [--methods itq kmh ...] [--features PATH]

Needs the prepared dataset and S-matrix of a pipeline run (`dvc repro smatrix`). Computes the
GIST features (timed) unless --features points at existing ones, then fits each method at each
bit length on the first n_train items of the seeded training order, as the pipeline does, and
encodes the whole dataset. Prints a markdown table for docs/benchmarks.md. Not a test.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

from shdh.hashers import hasher_class
from shdh.hashers.kmh import KMH
from shdh.steps.features import features as gist_step
from shdh.steps.fit_shallow import training_inputs

SHALLOW = ["itq", "kmh", "ksh", "ksh+h", "lfh", "cosdish", "cosdish+h"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prepared", default="artifacts/prepared")
    parser.add_argument("--smatrix", default="artifacts/smatrix/smatrix.npz")
    parser.add_argument("--features", default=None, help="existing GIST .npy (skips timing it)")
    parser.add_argument("--n-train", type=int, default=None)
    parser.add_argument("--bits", type=int, nargs="+", default=[32, 48, 64])
    parser.add_argument("--methods", nargs="+", default=SHALLOW)
    args = parser.parse_args()

    print(
        f"machine: {platform.machine()}, {os.cpu_count()} cores, "
        f"load average at start {os.getloadavg()[0]:.2f}"
    )
    features = args.features
    if features is None:
        features = str(Path(tempfile.mkdtemp(prefix="shdh-gist-")) / "gist.npy")
        start = time.perf_counter()
        gist_step(args.prepared, features)
        print(f"GIST-512 of the whole dataset: {time.perf_counter() - start:.1f} s")
    all_features = np.load(features)

    print("\n| method | bits | n_train | fit (s) | encode all (s) |")
    print("|---|---:|---:|---:|---:|")
    for method in args.methods:
        cls = hasher_class(method)
        X, pairs = training_inputs(
            cls, Path(args.prepared), Path(args.smatrix), Path(features), args.n_train
        )
        for bits in args.bits:
            if cls is KMH and bits % 4:
                continue
            hasher = cls(n_bits=bits, seed=0)
            start = time.perf_counter()
            hasher.fit(X, pairs)
            fit = time.perf_counter() - start
            start = time.perf_counter()
            hasher.encode(all_features)
            enc = time.perf_counter() - start
            print(f"| {method} | {bits} | {len(X)} | {fit:.1f} | {enc:.1f} |", flush=True)
    print(f"\nload average at end {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
