"""SHDH against DPSH (and SHDH's ablations) over several seeds, with the same budget.

Issue target: give SHDH and DPSH the same backbone, data, epochs and tuning budget, compare them
over at least 3 seeds (mean and spread), and check that both losses train (bit flips between
epochs, bit balance). Variants change one setting of params.yaml's `train` section, so an
ablation isolates one cause (loss form, code layout, learning rate):

    python benchmarks/shdh_vs_dpsh.py --seeds 0 1 2 --n-train 20000 \
        --variants shdh dpsh shdh:e1=matrix shdh:layout=paper

Needs the prepared dataset and S-matrix of a pipeline run (`dvc repro smatrix`). The split is
the pipeline's (seed 0); a run's seed sets the network's initialisation and the shuffling.
Prints one row per run, then mean and standard deviation per variant, as markdown, and writes
them to --out as JSON. Not a test: it trains networks for minutes.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from shdh.plan.all_methods import fit_plan
from shdh.steps.fit_deep import fit
from shdh.steps.score import score

COLUMNS = ("ndcg_list@100", "ndcg@100", "acg@100", "wr@1000", "wr@5000")


def parse_variant(text: str) -> tuple[str, dict]:
    """ "shdh:e1=matrix,lr=0.01" -> ("shdh", {"e1": "matrix", "lr": 0.01})."""
    method, _, rest = text.partition(":")
    overrides = {}
    for item in filter(None, rest.split(",")):
        key, _, value = item.partition("=")
        overrides[key] = yaml.safe_load(value)
    return method, overrides


def train_section(params: dict, method: str, overrides: dict, n_train: int | None) -> dict:
    """params.yaml's train section with the variant's overrides in the right sub-mapping."""
    section = json.loads(json.dumps(params["train"]))
    section["n_train"] = n_train
    for key, value in overrides.items():
        target = (
            section if key in section and not isinstance(section[key], dict) else section[method]
        )
        target[key] = value
    return section


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml")
    parser.add_argument("--variants", nargs="+", default=["shdh", "dpsh"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--bits", type=int, default=64)
    parser.add_argument("--n-train", type=int, default=None)
    parser.add_argument("--out", default=None, help="JSON file for the per-run results")
    parser.add_argument(
        "--eval-smatrix",
        default=None,
        help="score against this S-matrix artifact instead of the training one (e.g. train on "
        "flat leaf labels, score on the hierarchy: same items, same split)",
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    params = yaml.safe_load(Path(args.params).read_text())
    work = Path(tempfile.mkdtemp(prefix="shdh-vs-dpsh-"))
    os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{work / 'mlflow.db'}")
    print(f"machine: {platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    print(
        f"budget: {params['train']['epochs']} epochs, width {params['train']['width']}, "
        f"{args.bits} bits, n_train {args.n_train or 'all'}\n"
    )
    print(
        "| variant | seed | " + " | ".join(COLUMNS) + " | last-epoch flips | bit balance |"
        " train s |"
    )
    print("|---|---:|" + "---:|" * (len(COLUMNS) + 3))
    runs = []
    for variant in args.variants:
        method, overrides = parse_variant(variant)
        for seed in args.seeds:
            models = work / f"{variant.replace(':', '_')}-{seed}" / "models"
            section = train_section(params, method, overrides, args.n_train)
            start = time.perf_counter()
            plan = fit_plan(
                section,
                method,
                args.bits,
                None,
                seed=seed,
                models_root=models,
            )
            mdir = fit(
                plan,
                prepared_dir=params["data"]["prepared_dir"],
                smatrix_path=params["smatrix"]["out"],
                progress=False,
            )
            seconds = time.perf_counter() - start
            ev = {**params["evaluate"], "report": None, "random_floor": False}
            metrics = score(
                [plan],
                prepared_dir=params["data"]["prepared_dir"],
                smatrix_path=args.eval_smatrix or params["smatrix"]["out"],
                results_dir=models.parent / "results",
                eval_params=ev,
            )[method][str(args.bits)]
            last = json.loads((mdir / "history.json").read_text())[-1]
            row = {
                "variant": variant,
                "seed": seed,
                "bits": args.bits,
                **{c: metrics[c] for c in COLUMNS},
                "flip_fraction": last["flip_fraction"],
                "bit_balance": last["bit_balance"],
                "train_seconds": seconds,
            }
            runs.append(row)
            cells = " | ".join(f"{row[c]:.4f}" for c in COLUMNS)
            print(
                f"| {variant} | {seed} | {cells} | {row['flip_fraction']:.3f} | "
                f"{row['bit_balance']:.3f} | {seconds:.0f} |",
                flush=True,
            )
    print("\n| variant | seeds | " + " | ".join(f"{c} mean ± sd" for c in COLUMNS) + " |")
    print("|---|---:|" + "---:|" * len(COLUMNS))
    for variant in args.variants:
        rows = [r for r in runs if r["variant"] == variant]
        cells = []
        for c in COLUMNS:
            values = [r[c] for r in rows]
            sd = statistics.stdev(values) if len(values) > 1 else 0.0
            cells.append(f"{statistics.mean(values):.4f} ± {sd:.4f}")
        print(f"| {variant} | {len(rows)} | " + " | ".join(cells) + " |")
    if args.out:
        Path(args.out).write_text(json.dumps(runs, indent=2) + "\n")


if __name__ == "__main__":
    main()
