"""evaluate: encode, rank and score every fitted method; metrics, codes files and plots.

The pipeline trains every planned fit as a task of its own, so that each can be retried (KFP
does not retry a task inside a ParallelFor). kfp hands a component a list of artifacts only out
of a ParallelFor (dsl.Collected), so evaluate takes one Model input per fit instead: its
component is made for the plan when the pipeline is built (`evaluate_for`), with the inputs
fit_0 ... fit_N-1, and gist where the plan has shallow fits. Its body, the same for every plan,
is shdh.kubeflow.evaluate_fits.
"""

from __future__ import annotations

import functools
import linecache
from typing import Any

from kfp import dsl
from kfp.dsl import Dataset, Input, Metrics, Model, Output

from shdh.kfp.components.image import IMAGE

# kfp serialises a component's source (inspect.getsource) into the pipeline, and the executor
# matches the task's inputs to the function's parameters by name, so the per-plan inputs must
# be parameters written in the source: it is generated from this template.
_SOURCE = '''def evaluate(
    prepared: Input[Dataset],
    similarity: Input[Dataset],
    deep_runs: list,
    shallow_runs: list,
    settings: str,
    seed: int,
    profile: str,
    pipeline_run_id: str,
    results: Output[Dataset],
    metrics: Output[Metrics],{extra}
):
    """Score every model (shdh evaluate), log the metrics to each model's MLflow run, write the
    results table, scores and figures onto the pipeline's parent run and close it.

    Inputs:
        prepared: the dataset folder from `prepare` (the query/database split).
        similarity: the S-matrix from `smatrix` (the ancestors that define relevance).
        deep_runs: the deep {{method, bits, own_seed}} fits of the plan, in scoring order.
        shallow_runs: the shallow {{method, bits, own_seed}} fits of the plan (may be empty).
        settings: the `evaluate` section of params.yaml as JSON (n, wr_ns, curve_max, ...).
        seed: the master seed (the random-codes floor).
        profile: the params profile (an MLflow tag).
        pipeline_run_id: the Kubeflow run id (the MLflow parent run's key).{extra_doc}
    Outputs:
        results: metrics.json, timings.json, table.md, codes/ and plots/, as in results/.
        metrics: the @n metrics of every method and code length, for the Kubeflow UI.
    """
    from shdh.runtime.instruction_set import pin_cpu

    pin_cpu()  # before numpy and torch load: the same bits on every CPU

    from shdh.kubeflow import evaluate_fits

    evaluate_fits(
        prepared=prepared,
        similarity=similarity,
        runs=[*deep_runs, *shallow_runs],
        models=[{models}],
        settings=settings,
        seed=seed,
        profile=profile,
        pipeline_run_id=pipeline_run_id,
        results=results,
        metrics=metrics,
        gist={gist},
    )
'''


def fit_inputs(n_fits: int) -> list[str]:
    """The names of evaluate's Model inputs, one per fit, in the plan's order."""
    return [f"fit_{i}" for i in range(n_fits)]


@functools.cache
def evaluate_for(n_fits: int, *, gist: bool) -> Any:
    """The evaluate component for a plan of `n_fits` fits (deep first, then shallow), with the
    GIST features as an input where the plan has shallow fits."""
    if n_fits < 1:
        raise ValueError("evaluate: the plan has no fits to score")
    names = fit_inputs(n_fits)
    extra = [*(["gist: Input[Dataset]"] if gist else []), *(f"{n}: Input[Model]" for n in names)]
    docs = [*(["gist: the GIST features from `features`."] if gist else [])]
    docs += [
        f"{n}: the model of the plan's fit {i} (train or baseline)." for i, n in enumerate(names)
    ]
    source = _SOURCE.format(
        extra="".join(f"\n    {line}," for line in extra),
        extra_doc="".join(f"\n        {line}" for line in docs),
        models=", ".join(names),
        gist="gist" if gist else "None",
    )
    # A made-up file name that linecache serves, so that inspect.getsource finds the source.
    filename = f"<shdh.kfp.components.evaluate: {n_fits} fits{', gist' if gist else ''}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace: dict[str, Any] = {
        "Input": Input,
        "Output": Output,
        "Dataset": Dataset,
        "Metrics": Metrics,
        "Model": Model,
        "__name__": __name__,
    }
    # dont_inherit: this module's `annotations` future would leave the types as strings.
    exec(compile(source, filename, "exec", dont_inherit=True), namespace)
    return dsl.component(base_image=IMAGE, install_kfp_package=False)(namespace["evaluate"])
