"""The GPU fits' convergence curves, from their fit records: validation NDCG@100 and training
loss per epoch of every deep method, with where each fit stopped and why.

    python benchmarks/convergence_curves.py [--fits results/gpu/fits] [--bits 64]
        [--figure docs/images/gpu-convergence.png]

The records are those `python -m shdh.bundle train` writes and `shdh evaluate --codes-from`
keeps (results/gpu/fits/METHOD-BITS-seedS.json); each holds the fit's per-epoch history. Prints
markdown for docs/results-gpu.md: per method, the mean over seeds at every epoch that all seeds
reached, then one row per fit (epochs, the epoch the lr decayed, stopped by the rule or at the
cap, and at the cap whether the score was still gaining by the rule, last validation score).
Not a test.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

from shdh.training import convergence

METRIC = "val_ndcg_at_100"
METHODS = ("shdh", "dpsh", "oracle")


def read_fits(folder: Path, bits: int) -> dict[str, list[dict]]:
    """method -> its fit records at this length, by seed."""
    fits: dict[str, list[dict]] = {}
    for path in sorted(folder.glob(f"*-{bits}-seed*.json")):
        record = json.loads(path.read_text())
        if record.get("bits") == bits and record["history"] and METRIC in record["history"][0]:
            fits.setdefault(record["method"], []).append(record)
    if not fits:
        raise SystemExit(f"{folder}: no {bits}-bit fit record with a validation history")
    return fits


def per_epoch_means(records: list[dict], key: str) -> list[float]:
    """The mean over the fits at each epoch that every one of them reached."""
    depth = min(len(r["history"]) for r in records)
    return [statistics.fmean(r["history"][i][key] for r in records) for i in range(depth)]


def draw(fits: dict[str, list[dict]], path: Path, bits: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colours = {"shdh": "tab:red", "dpsh": "tab:blue", "oracle": "tab:gray"}
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4))
    for method in [m for m in METHODS if m in fits]:
        for i, record in enumerate(fits[method]):
            epochs = [e["epoch"] for e in record["history"]]
            label = f"{method.upper()} (seeds {len(fits[method])})" if i == 0 else None
            style = {"color": colours[method], "alpha": 0.8, "linewidth": 1.2}
            left.plot(epochs, [e[METRIC] for e in record["history"]], label=label, **style)
            first = record["history"][0]["loss"]
            right.plot(epochs, [e["loss"] / first for e in record["history"]], **style)
    left.set(xlabel="epoch", ylabel="validation NDCG@100", title=f"{bits} bits: validation")
    right.set(xlabel="epoch", ylabel="training loss / epoch 1", title="training loss")
    right.set_yscale("log")
    left.legend()
    for ax in (left, right):
        ax.grid(alpha=0.3)
        ax.xaxis.get_major_locator().set_params(integer=True)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    print(f"figure: {path}")


def decay_epoch(record: dict) -> int | None:
    lrs = [e["lr"] for e in record["history"]]
    return next((i + 1 for i in range(1, len(lrs)) if lrs[i] < lrs[i - 1]), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fits", type=Path, default=Path("results/gpu/fits"))
    parser.add_argument("--bits", type=int, default=64)
    parser.add_argument("--figure", type=Path, default=Path("docs/images/gpu-convergence.png"))
    args = parser.parse_args()
    fits = read_fits(args.fits, args.bits)
    draw(fits, args.figure, args.bits)
    methods = [m for m in METHODS if m in fits]
    means = {m: per_epoch_means(fits[m], METRIC) for m in methods}
    print("\n| epoch | " + " | ".join(f"{m.upper()} val NDCG@100" for m in methods) + " |")
    print("|---:|" + "---:|" * len(methods))
    for epoch in range(1, max(len(v) for v in means.values()) + 1):
        cells = [f"{v[epoch - 1]:.4f}" if epoch <= len(v) else "" for v in means.values()]
        print(f"| {epoch} | " + " | ".join(cells) + " |")
    print("\n| fit | epochs | lr decayed after epoch | ended by | last val NDCG@100 | seconds |")
    print("|---|---:|---:|---|---:|---:|")
    for method in methods:
        for r in fits[method]:
            h = r["history"]
            loop = r["params"]["loop"]
            ended = convergence.ended_by(h, loop["patience"], loop["min_delta"])
            decayed = decay_epoch(r)
            print(
                f"| {method}-{args.bits}-seed{r['own_seed']} | {len(h)} | "
                f"{decayed - 1 if decayed else '-'} | {ended} | {h[-1][METRIC]:.4f} | "
                f"{r['fit_seconds']:.0f} |"
            )


if __name__ == "__main__":
    main()
