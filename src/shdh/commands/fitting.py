"""The loop that `shdh train` and `shdh baselines` share: one method's fits at its code lengths,
inside the pipeline's parent run."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from shdh.commands.common import pipeline_context
from shdh.plan.all_methods import section_fits
from shdh.runtime.atomic import check_writable


def fit_method(
    args: argparse.Namespace,
    params: dict[str, Any],
    context: dict[str, Any] | None,
    step: str,
    method: str,
    bits: Sequence[int],
    *,
    models_root: Path,
    fit: Callable[..., Path],
    **options: Any,
) -> dict[str, Any]:
    """Fit one method of the step's section (`shdh train`, `shdh baselines`) at each code length,
    in the pipeline's parent run, opened on the first call; returns the tracking context for the
    next method. The method's folder is checked before any fit, and the plan is made inside the
    run, so that a settings error found there marks the parent run failed too (`options`: the
    step's own arguments to `fit`)."""
    from shdh.tracking import mlflow_runs as tracking

    if not bits:
        raise SystemExit(f"shdh {step}: no code length to fit {method} at (see --bits)")
    check_writable(models_root / method, f"{step}.models_dir")
    context = context if context is not None else pipeline_context(args, params)
    with tracking.failure_ends(context["parent_run_id"]):
        fits = section_fits(
            params[step],
            [method],
            bits,
            seed=params["seed"],
            models_root=models_root,
        )
        for planned in fits:
            print(f"model written to {fit(planned, **options, **context)}")
    return context
