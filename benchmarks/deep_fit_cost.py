"""SHDH's and DPSH's fits on the same network, budget and batch, side by side: the training
step's phases and the whole fit, interleaved so that a busy machine slows both alike.

Question (issue 54): DPSH's fit was measured at 2.3-3.2 times SHDH's in a `make run`. Is that
the method (its loss, or what its gradients do to the network's speed), or the machine?

    python benchmarks/deep_fit_cost.py [--params params.yaml] [--bits 48] [--rounds 20]
        [--fits 2] [--quick]

After `dvc repro smatrix` (the prepared data and the S-matrix). Both methods take params.yaml's
train section (the default profile: the eighth-width CNN-F, batch 128, 3 epochs over 10,000
items), through the hashers themselves (shdh.hashers.deep: the loop, the optimiser, clipping),
with the CPU pin a front door sets.
1. Steps: a fresh network per method (the same seed), the same batches; each round times one
   step of each, in alternating order: the batch made network input, forward, the loss,
   backward, gradient clipping, the SGD step; the median per phase over --rounds.
2. Fits: `fit` of each method, alternated (SHDH, DPSH, SHDH, DPSH for --fits 2), each epoch's
   seconds and images/s from the fit's history, and the fit's wall time.
--quick: 5 rounds, one fit each of 1 epoch over 2,000 items. Not a test.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from shdh.runtime.instruction_set import pin_cpu

pin_cpu()  # before numpy and torch load, as every front door does

import numpy as np  # noqa: E402
import torch  # noqa: E402
import yaml  # noqa: E402
from provenance import commit_line, machine_line  # noqa: E402 (benchmarks/provenance.py)

from shdh.hashers import get_hasher_class  # noqa: E402
from shdh.nets.cnnf import to_input  # noqa: E402
from shdh.plan.all_methods import method_params  # noqa: E402
from shdh.plan.fit_grid import fit_plan  # noqa: E402
from shdh.steps.fit_deep import training_inputs  # noqa: E402

METHODS = ("shdh", "dpsh")
PHASES = ("input", "forward", "loss", "backward", "clip", "sgd")


def hasher_for(params: dict, method: str, bits: int, n_train: int | None, epochs: int | None):
    """The method's hasher as the pipeline makes it from params.yaml, and its training inputs."""
    section = {**params["train"], **({"n_train": n_train} if n_train else {})}
    if epochs:
        section["epochs"] = epochs
    plan = fit_plan(
        section, method, bits, None, seed=params["seed"], models_root=Path("/nonexistent"),
        method_params=method_params,
    )  # fmt: skip
    cls = get_hasher_class(method)
    X, pairs = training_inputs(
        cls, Path(params["data"]["prepared_dir"]), Path(params["smatrix"]["out"]), plan.n_train
    )
    hasher = cls(n_bits=plan.bits, seed=plan.seed, **{**plan.params, "work_dir": None})
    return hasher, X, pairs


def step_parts(hasher, X, pairs) -> tuple:
    """A fresh network, its loss, its optimiser: what the loop's step runs, made here."""
    from shdh.training.checkpoint import build_model_for
    from shdh.training.state import make_optimizer

    anc = np.asarray(pairs.ancestors)
    sizes, levels = hasher._layout(int(anc.shape[1]))
    config = hasher.train_config()
    torch.manual_seed(hasher.seed)
    model = build_model_for(hasher.loop, 1 if X.ndim == 3 else X.shape[3], sizes).train()
    loss = hasher._loss_fn(sizes, levels, [float(w) for w in pairs.weights])
    optimiser = make_optimizer(config, model, torch.device("cpu"))
    return model, loss, optimiser, torch.as_tensor(anc, dtype=torch.long), hasher.loop


def time_steps(parts: dict, X, rounds: int, batch: int) -> dict[str, dict[str, float]]:
    rng = np.random.default_rng(0)
    seconds = {m: {p: [] for p in PHASES} for m in parts}
    for r in range(rounds):
        idx = np.sort(rng.choice(len(X), batch, replace=False))
        for method in METHODS if r % 2 else METHODS[::-1]:
            model, loss_fn, optimiser, anc, loop = parts[method]
            marks = [time.perf_counter()]
            x = to_input(X[idx], loop.image_size, "cpu")
            marks.append(time.perf_counter())
            z = model(x)
            marks.append(time.perf_counter())
            loss, _ = loss_fn(z.float(), anc[idx], None)
            marks.append(time.perf_counter())
            optimiser.zero_grad()
            loss.backward()
            marks.append(time.perf_counter())
            torch.nn.utils.clip_grad_norm_(model.parameters(), loop.grad_clip)
            marks.append(time.perf_counter())
            optimiser.step()
            marks.append(time.perf_counter())
            for phase, a, b in zip(PHASES, marks, marks[1:], strict=True):
                seconds[method][phase].append(b - a)
    return {m: {p: statistics.median(v) for p, v in s.items()} for m, s in seconds.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--bits", type=int, default=48)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--fits", type=int, default=2)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    n_train, epochs = (2000, 1) if args.quick else (None, None)
    if args.quick:
        args.rounds, args.fits = 5, 1
    params = yaml.safe_load(Path(args.params).read_text())
    print(f"machine: {machine_line()}")
    print(commit_line())
    made = {m: hasher_for(params, m, args.bits, n_train, epochs) for m in METHODS}
    parts = {m: step_parts(*made[m]) for m in METHODS}
    batch = parts["shdh"][4].batch_size
    print(f"{args.bits} bits, batch {batch}, {torch.get_num_threads()} threads\n")
    steps = time_steps(parts, made["shdh"][1], args.rounds, batch)
    print("| method | " + " | ".join(f"{p} ms" for p in PHASES) + " | step ms |")
    print("|---|" + "---:|" * (len(PHASES) + 1))
    for method, phases in steps.items():
        cells = " | ".join(f"{1e3 * phases[p]:.1f}" for p in PHASES)
        print(f"| {method} | {cells} | {1e3 * sum(phases.values()):.1f} |")
    print("\n| fit | method | epochs: seconds (images/s) | fit s |")
    print("|---:|---|---|---:|")
    for n in range(args.fits):
        for method in METHODS:
            hasher, X, pairs = hasher_for(params, method, args.bits, n_train, epochs)
            start = time.perf_counter()
            hasher.fit(X, pairs)
            wall = time.perf_counter() - start
            epochs_ = ", ".join(
                f"{e['seconds']:.1f} ({e['images_per_sec']:,.0f})" for e in hasher.history_
            )
            print(f"| {n + 1} | {method} | {epochs_} | {wall:.1f} |", flush=True)


if __name__ == "__main__":
    main()
