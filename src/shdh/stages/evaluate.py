"""shdh evaluate: encode, rank and score every fitted method; write metrics, codes, plots."""

from __future__ import annotations

import argparse
from pathlib import Path

from shdh import evaluation, parent_run
from shdh.stages.common import add_params_argument, params_section, pipeline_context, script_main

HELP = "score every fitted method: metrics.json, codes files, WR plots, results table"


def method_bits(params: dict, method: str) -> list[int]:
    """The code lengths params.yaml asks `method` to run at: train.bits for the deep methods,
    baselines.bits for the shallow ones; KMH only where its subspaces divide the length (as in
    the paper's table)."""
    from shdh.hashers import get_hasher_class
    from shdh.hashers.kmh import KMH

    if get_hasher_class(method).input_kind == "images":
        return list(params["train"]["bits"])
    baselines = params.get("baselines") or {}
    kmh_bits = (baselines.get("kmh") or {}).get("bits_per_subspace", 4)
    return [b for b in baselines.get("bits", []) if method != "kmh" or KMH.supports(b, kmh_bits)]


def models_root(params: dict, method: str) -> Path:
    """Where `method`'s model folders live: train.models_dir for the deep methods (a DVC
    output per method), baselines.models_dir for the shallow ones (one output for all)."""
    from shdh.hashers import get_hasher_class

    if get_hasher_class(method).input_kind == "images":
        return Path(params["train"]["models_dir"])
    return Path(params["baselines"]["models_dir"])


def planned_runs(params: dict) -> list[tuple[str, int, int | None]]:
    """(method, bits, replicate seed) for every deep and shallow method the params ask for, in
    that order; the seed is None without a `seeds` list (fitting.replicate_seeds)."""
    from shdh.fitting import replicate_seeds

    train, baselines = params["train"], params.get("baselines") or {}
    runs = [(m, b, s) for b in train["bits"] for m in train["methods"]
            for s in replicate_seeds(train)]  # fmt: skip
    for b in baselines.get("bits", []):
        runs += [(m, b, s) for m in baselines.get("methods", []) if b in method_bits(params, m)
                 for s in replicate_seeds(baselines)]  # fmt: skip
    return runs


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_params_argument(parser)


def run(args: argparse.Namespace) -> int:
    params, ev = params_section(args, "evaluate")
    context = pipeline_context(args, params)
    parent = context["parent_run_id"]
    with parent_run.failure_ends(parent):
        evaluation.evaluate(
            prepared_dir=params["data"]["prepared_dir"], smatrix_path=params["smatrix"]["out"],
            models_dir=params["train"]["models_dir"], results_dir=ev["results_dir"],
            shallow_models_dir=params["baselines"]["models_dir"],
            runs=planned_runs(params), eval_params=ev, features_path=params["features"]["out"],
            seed=params["seed"], **context,
        )  # fmt: skip
        parent_run.summarize(parent, ev["results_dir"], ev.get("report"))
    parent_run.end_parent(parent)  # the last tracked stage: the pipeline run is complete
    print((Path(ev["results_dir"]) / "table.md").read_text())
    return 0


def main(argv=None) -> int:
    return script_main(HELP, add_arguments, run, argv)


if __name__ == "__main__":
    raise SystemExit(main())
