"""The score step: encode queries and database with every fitted method, rank, score.

Every method is scored by the same code on the same split: its codes are written as a codes
file (docs/codes-format.md) and the metrics are computed from that file's contents, so
`shdh metrics` on a written file reproduces metrics.json exactly. Seeded random codes are scored
too: the floor that every method must beat.

With a `seeds` list every method is fitted once per seed; the tables, metrics.json and the
figures then hold the mean over the seeds (metrics.json also the sample standard deviation,
as METRIC_sd), and metrics_by_seed.json every fit's own figures.
"""

from __future__ import annotations

import json
import logging
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from shdh.core.codes_file import (
    CODES_DIR,
    FITS_DIR,
    Codes,
    evaluate_codes,
    load_codes,
    save_codes,
)
from shdh.core.peer_metrics import MAHP_DEPTHS, MAP_DEPTHS
from shdh.hashers import load_hasher
from shdh.plan.fits import Fit, fit_name
from shdh.reporting.figures import (
    CURVES_FILE,
    PLOTS_DIR,
    save_curves,
    wr_at_n_figure,
    write_figures,
)
from shdh.reporting.report import (
    METRICS_FILE,
    TABLE_FILE,
    alpha_sweep,
    check_outputs,
    results_table,
    write_report,
)
from shdh.reporting.ui_view import by_bits_scores
from shdh.runtime.atomic import atomic_write_text
from shdh.runtime.errors import ConfigError
from shdh.runtime.json_files import read_json_object
from shdh.steps import codes_cache, score_cache
from shdh.steps.seed_summary import (
    Scored,
    mean_curves,
    mean_timings,
    metrics_by_seed,
    nested_metrics,
)
from shdh.steps.split_inputs import Split, load_split
from shdh.tracking import mlflow_runs
from shdh.training import convergence

log = logging.getLogger(__name__)


BY_SEED_FILE = "metrics_by_seed.json"


def random_codes(n_items: int, bits: int, seed: int) -> np.ndarray:
    """Seeded random {-1,+1} codes: the floor every method must beat."""
    rng = np.random.default_rng([seed, bits, 20170407])
    return np.where(rng.random((n_items, bits)) < 0.5, -1, 1).astype(np.int8)


def score(
    fits: list[Fit],
    *,
    prepared_dir: str | Path,
    smatrix_path: str | Path,
    results_dir: str | Path,
    eval_params: dict[str, Any],
    features_path: str | Path | None = None,
    tags: dict[str, str] | None = None,
    parent_run_id: str | None = None,
    codes_from: str | Path | None = None,
) -> dict[str, Any]:
    """Score every fit; write results_dir/{metrics.json, metrics_by_seed.json, timings.json,
    table.md, curves.npz, codes/NAME.npz, plots/*.png} and the report (eval_params["report"]).

    Each fit's model is read from fit.out_dir. The random floor is scored once per seed of the
    fits, so it has a spread too.

    codes_from: a folder trained elsewhere from a bundle (shdh.bundle): a fit with a codes file
    there is scored from it instead of from a model, after checking that it holds this run's
    query and database items (ids and ancestors, in the split's order); its fit record (device,
    settings, history) is kept as results_dir/fits/NAME.json.
    """
    results_dir = Path(results_dir)
    check_outputs(results_dir, eval_params.get("report"))
    split = load_split(prepared_dir, smatrix_path, features_path)
    scored: list[Scored] = []
    timings: dict[str, dict[str, list[dict[str, float]]]] = {}
    inputs = RunInputs(split)
    context = {
        "results_dir": results_dir,
        "eval_params": eval_params,
        "tags": tags,
        "parent_run_id": parent_run_id,
    }
    imports = _imports(codes_from, fits, split.items())
    _check_models(fits, imports)
    for plan in fits:
        imported = imports.get(plan.name)
        if imported is not None:
            result, timing = _score_imported(plan, *imported, **context)
        else:
            result, timing = _score_model(plan, split, inputs, features_path, **context)
        scored.append(result)
        timings.setdefault(plan.method, {}).setdefault(str(plan.bits), []).append(timing)
    if eval_params.get("random_floor", True):
        scored += _random_floor(fits, split, **context)
    read = sum(s.cached for s in scored)
    if read:
        log.info(
            "%d of %d code sets unchanged since an earlier run: their scores were read from %s",
            read,
            len(scored),
            score_cache.cache_dir(),
        )
    return _write_results(scored, timings, split, results_dir, eval_params)


def _score_model(
    plan: Fit, split: Split, inputs: RunInputs, features_path: Any, **context: Any
) -> tuple[Scored, dict[str, float | None]]:
    """Encode the split with the fit's saved model, then score the codes in the fit's run."""
    hasher = load_hasher(plan.hasher_dir)
    if hasher.n_bits != plan.bits:
        raise ValueError(
            f"{plan.hasher_dir}: holds a {hasher.n_bits}-bit {plan.method}, not {plan.bits} bits"
        )
    if hasher.input_kind not in split.inputs:
        raise ValueError(
            f"{plan.method}: needs {hasher.input_kind}, which the score step was not given "
            f"(features: {features_path})"
        )
    q, db, encode_s = inputs.encode(plan.name, hasher)
    codes = split.codes(q, db, hasher.segment_sizes(), hasher.segment_weights())
    run_id = mlflow_runs.load_run_ref(plan.run_ref, context["parent_run_id"])
    result = _score(
        codes,
        plan.method,
        plan.bits,
        plan.name,
        plan.seed,
        run_id,
        extra={"encode_seconds": encode_s},
        **context,
    )
    return result, {"fit_seconds": _fit_seconds(plan.record), "encode_seconds": encode_s}


class RunInputs:
    """What the run's models encode, gathered once for all of them: each input kind's query and
    database rows, and the keys of those rows in the codes cache."""

    def __init__(self, split: Split) -> None:
        self.split = split
        self.gathered: dict[str, tuple[np.ndarray, np.ndarray]] = {}
        self.keys = codes_cache.RowKeys(split.inputs)

    def encode(self, name: str, hasher: Any) -> tuple[np.ndarray, np.ndarray, float]:
        """The split's query and database codes by this model, and the seconds encoding took:
        read from the codes cache where this model encoded these items before."""
        split, kind = self.split, hasher.input_kind
        X_q, X_db = split.encoded(kind, self.gathered)
        parts = [(X_q, self.keys(kind, split.q_idx)), (X_db, self.keys(kind, split.db_idx))]
        (q, q_s, q_read), (db, db_s, db_read) = codes_cache.cached_encodes(hasher, parts)
        if q_read and db_read:
            log.info("%s: its codes were read from %s", name, codes_cache.cache_dir())
        return q, db, q_s + db_s


def _score_imported(
    plan: Fit, codes: Codes, record: dict[str, Any], **context: Any
) -> tuple[Scored, dict[str, float | None]]:
    """Score codes trained elsewhere; keep their fit record (the card, the settings)."""
    if codes.n_bits != plan.bits:
        raise ValueError(f"{plan.name}: the imported codes hold {codes.n_bits} bits")
    loop = record.get("params", {}).get("loop", {})
    ended = convergence.ended_by_tag(
        record.get("history", []), loop.get("patience", 0), loop.get("min_delta", 0.0)
    )
    trained_on = {"trained_on": str(record.get("device", "")), **ended}
    context = {**context, "tags": {**(context["tags"] or {}), **trained_on}}
    extra = {"encode_seconds": record.get("encode_seconds", 0.0)}
    result = _score(
        codes, plan.method, plan.bits, plan.name, plan.seed, None, extra=extra, **context
    )
    fits_dir = context["results_dir"] / FITS_DIR
    atomic_write_text(fits_dir / f"{plan.name}.json", json.dumps(record, indent=2) + "\n")
    timing = {
        "fit_seconds": record.get("fit_seconds"),
        "encode_seconds": record.get("encode_seconds"),
    }
    return result, timing


def floor_seeds(fits: list[Fit]) -> list[tuple[int, int | None]]:
    """(seed, own_seed) of the random floor, once per seed the fits use, in seed order. The
    deep methods and the shallow ones may be seeded differently: `train.seeds: [0, 1]` beside
    `baselines.seeds: null` and a master seed of 0 gives fits seeded 0 with and without an own
    seed. They are one floor, named with the seed (random-B-seed0), not two copies of the same
    codes."""
    named: dict[int, int | None] = {}
    for plan in fits:
        if named.get(plan.seed) is None:  # absent, or so far only unnamed
            named[plan.seed] = plan.own_seed
    return sorted(named.items())


def _random_floor(fits: list[Fit], split: Split, **context: Any) -> list[Scored]:
    """Seeded random codes at every code length, once per seed of the fits (floor_seeds)."""
    scored = []
    for bits in sorted({plan.bits for plan in fits}):
        for seed, own_seed in floor_seeds(fits):
            q = random_codes(len(split.q_idx), bits, seed)
            db = random_codes(len(split.db_idx), bits, seed + 1)
            name = fit_name("random", bits, own_seed)
            scored.append(
                _score(
                    split.codes(q, db, [bits], [1.0]), "random", bits, name, seed, None, **context
                )
            )
    return scored


def _write_results(
    scored: list[Scored],
    timings: dict[str, dict[str, list[dict]]],
    split: Split,
    results_dir: Path,
    eval_params: dict[str, Any],
) -> dict[str, Any]:
    metrics = nested_metrics(scored)
    curves = mean_curves(scored)
    n = eval_params["n"]
    atomic_write_text(results_dir / METRICS_FILE, json.dumps(metrics, indent=2) + "\n")
    by_seed = json.dumps(metrics_by_seed(scored), indent=2) + "\n"
    atomic_write_text(results_dir / BY_SEED_FILE, by_seed)
    timing = mean_timings(timings, items=len(split.q_idx) + len(split.db_idx))
    atomic_write_text(results_dir / "timings.json", json.dumps(timing, indent=2) + "\n")
    save_curves(results_dir / CURVES_FILE, curves, dataset=split.dataset, n=n)
    atomic_write_text(results_dir / TABLE_FILE, results_table(metrics, n))
    sweep = alpha_sweep(eval_params.get("alpha_sweep"))
    figures = write_figures(curves, results_dir / PLOTS_DIR, sweep)
    if eval_params.get("report"):
        write_report(eval_params["report"], metrics, figures, dataset=split.dataset, n=n)
    return metrics


def _imports(
    codes_from: str | Path | None, fits: list[Fit], items: dict[str, np.ndarray]
) -> dict[str, tuple[Codes, dict[str, Any]]]:
    """Every fit's codes and record in codes_from, read and checked before anything is written,
    so that a bad file leaves the results as they were. A folder that is not there, or holds no
    fit of this run, is refused: scoring the local models instead would pass for scoring it."""
    if codes_from is None:
        return {}
    folder = Path(codes_from)
    if not folder.is_dir():
        raise ConfigError(f"--codes-from {folder}: no such folder")
    found = {}
    for plan in fits:
        imported = _imported_codes(folder, plan, items)
        if imported is not None:
            found[plan.name] = imported
    if not found:
        names = ", ".join(f"{CODES_DIR}/{plan.name}.npz" for plan in fits)
        raise ConfigError(f"--codes-from {folder}: holds none of this run's codes ({names})")
    return found


def _check_models(fits: list[Fit], imports: dict[str, Any]) -> None:
    """Each fit scored from a model has one, before the first fit's results are written."""
    for plan in fits:
        if plan.name not in imports and not (plan.hasher_dir / "params.json").is_file():
            raise ConfigError(
                f"{plan.hasher_dir}: no fitted {plan.name} (params.json); run its training "
                f"step first, or score codes trained elsewhere with --codes-from"
            )


def _imported_codes(
    folder: Path, plan: Fit, items: dict[str, np.ndarray]
) -> tuple[Codes, dict[str, Any]] | None:
    """The codes and fit record of `plan` in a bundle's output folder, when it has them; a file
    made from another dataset or split is refused, naming it and what differs."""
    path = folder / CODES_DIR / f"{plan.name}.npz"
    if not path.is_file():
        return None
    codes = load_codes(path)
    for key, ours in items.items():
        theirs = getattr(codes, key)
        if theirs.shape != ours.shape or not np.array_equal(theirs, ours):
            raise ValueError(
                f"{path}: {key} differ from this run's ({theirs.shape} vs {ours.shape}): the "
                "codes were made from another dataset or split; export a bundle of this run "
                "(shdh bundle export) and train from it"
            )
    record_path = folder / FITS_DIR / f"{plan.name}.json"
    record = read_json_object(record_path, f"the fit record of {path}")
    log.info("%s: codes trained elsewhere (%s), from %s", plan.name, record.get("device"), path)
    return codes, record


def _fit_seconds(path: Path) -> float | None:
    """A fit's training time from its record; None where it has none."""
    return read_json_object(path, "the fit record").get("fit_seconds") if path.is_file() else None


def _score(
    codes: Codes,
    method: str,
    bits: int,
    name: str,
    seed: int,
    run_id: str | None,
    *,
    results_dir: Path,
    eval_params: dict[str, Any],
    tags: dict[str, str] | None,
    parent_run_id: str | None,
    extra: dict[str, float] | None = None,
) -> Scored:
    """Write the codes file, score it, and log metrics, codes and plot to the method's run."""
    path = results_dir / CODES_DIR / f"{name}.npz"
    save_codes(path, codes)
    settings = scoring_settings(eval_params, len(codes.db_ids))
    (metrics, curves), read = score_cache.cached_scores(
        codes,
        settings,
        lambda: evaluate_codes(codes, workers=eval_workers(eval_params.get("workers")), **settings),
    )
    result = Scored(method, bits, metrics, curves, path, seed, cached=read)
    rounded = json.dumps({k: round(v, 4) for k, v in metrics.items()})
    log.info("%s%s: %s", name, " (from the score cache)" if read else "", rounded)
    with tempfile.TemporaryDirectory() as tmp:  # for the run page only; results/ has Fig. 3
        artifacts = _run_artifacts(Path(tmp), path, result, name)
        logged = {**metrics, **(extra or {})}
        # The scores again at step = bits: the UI's view draws each method against the length.
        stepped = mlflow_runs.by_bits(metrics, by_bits_scores(eval_params["n"]))
        if run_id:  # the fit's run: added to, not reopened, so its duration stays the fit's
            mlflow_runs.log_to_run(run_id, logged, artifacts, stepped=stepped, step=bits)
        else:
            _new_method_run(
                name, method, bits, seed, logged, artifacts, tags, parent_run_id, stepped
            )
    return result


def scoring_settings(eval_params: dict[str, Any], n_db: int) -> dict[str, Any]:
    """The settings of shdh.core.metrics.evaluate that decide a score, from params.yaml's
    evaluate section; depths beyond the database are cut to it."""
    return {
        "n": eval_params["n"],
        "wr_ns": tuple(n for n in eval_params.get("wr_ns", (100, 1000, 5000)) if n <= n_db),
        "curve_max": min(eval_params.get("curve_max", 5000), n_db),
        "radius_queries": eval_params.get("radius_queries"),
        "map_depths": MAP_DEPTHS,
        "mahp_depths": MAHP_DEPTHS,
    }


# A method run's artifacts carry the same names in every run (the comparison view lists the
# artifacts two runs have in common); the codes file of results/codes/ is named after the fit.
RUN_CODES = "codes.npz"
RUN_PLOT = "wr.png"


def _run_artifacts(tmp: Path, codes_path: Path, result: Scored, name: str) -> list[tuple]:
    """The codes file and a WR@n plot of one fit, under the names every method run shares."""
    import shutil

    codes = shutil.copyfile(codes_path, tmp / RUN_CODES)
    plot = tmp / RUN_PLOT
    wr_at_n_figure({result.method: result.curves}, plot, title=f"{name.replace('-', ', ', 1)} bits")
    return [(codes, None), (plot, None)]


def _new_method_run(
    name: str,
    method: str,
    bits: int,
    seed: int,
    metrics: dict[str, float],
    artifacts: list[tuple],
    tags: dict[str, str] | None,
    parent_run_id: str | None,
    stepped: dict[str, float],
) -> None:
    """A run of its own for scores with no fit run (random codes, codes trained elsewhere);
    `stepped` logged at step = bits."""
    with mlflow_runs.run(
        run_name=name,
        parent_run_id=parent_run_id,
        params={"method": method, "bits": bits, "seed": seed},
        tags={**mlflow_runs.method_tags(method, bits, seed), **(tags or {})},
    ):
        mlflow_runs.log_metrics(metrics)
        mlflow_runs.log_metrics(stepped, step=bits)
        for artifact, artifact_path in artifacts:
            mlflow_runs.log_artifact(artifact, artifact_path)


def eval_workers(value: int | None) -> int:
    """Ranking threads: null in params.yaml means one per CPU this process may use (ranking
    releases the GIL): the container's CPU limit in a pod, else the cores it may run on."""
    if value is None:
        from shdh.runtime.cpu_quota import available_cpus

        return available_cpus()
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(
            f"params.yaml: evaluate.workers: expected a positive int or null, got {value!r}"
        )
    return value
