"""The evaluate step: encode queries and database with every fitted method, rank, score.

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
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shdh import tracking
from shdh.atomic import atomic_write_text, check_writable
from shdh.codes import Codes, load_codes, save_codes
from shdh.figures import (
    CURVES_FILE,
    PLOTS_DIR,
    Figure,
    load_alpha_sweep,
    load_curves,
    save_curves,
    wr_at_n_figure,
    write_figures,
)
from shdh.fitting import HASHER_DIR, RUN_REF, load_features
from shdh.hashers import get_hasher_class
from shdh.hashers.base import Hasher
from shdh.metrics import Curves
from shdh.metrics import evaluate as score_codes
from shdh.plan import fit_seed, model_dir, run_name
from shdh.report import results_doc, results_table, update_generated_section
from shdh.retrieval import pack_codes

log = logging.getLogger(__name__)


BY_SEED_FILE = "metrics_by_seed.json"


@dataclass
class Scored:
    method: str
    bits: int
    metrics: dict[str, float]
    curves: Curves
    codes_path: Path
    replicate: int | None = None  # the fit's seed when the params list several (else None)


def random_codes(n_items: int, bits: int, seed: int) -> np.ndarray:
    """Seeded random {-1,+1} codes: the floor every method must beat."""
    rng = np.random.default_rng([seed, bits, 20170407])
    return np.where(rng.random((n_items, bits)) < 0.5, -1, 1).astype(np.int8)


def evaluate(
    *,
    prepared_dir: str | Path,
    smatrix_path: str | Path,
    models_dir: str | Path,
    results_dir: str | Path,
    runs: list[tuple[str, int] | tuple[str, int, int | None]],
    eval_params: dict[str, Any],
    features_path: str | Path | None = None,
    shallow_models_dir: str | Path | None = None,
    seed: int = 0,
    tags: dict[str, str] | None = None,
    parent_run_id: str | None = None,
    codes_from: str | Path | None = None,
) -> dict[str, Any]:
    """Score every (method, bits[, replicate seed]) in `runs`; write results_dir/{metrics.json,
    metrics_by_seed.json, timings.json, table.md, curves.npz, codes/METHOD-BITS[-seedS].npz,
    plots/*.png} and the report.

    Models are read from models_dir/METHOD/METHOD-BITS[-seedS], the shallow methods' from
    shallow_models_dir when given (the DVC layout keeps them apart: one stage output each). The
    random floor is scored once per replicate seed, so it has a spread too.

    codes_from: a folder trained elsewhere from a bundle (shdh.bundle): a run with a codes file
    there is scored from it instead of from a model, after checking that it holds this run's
    query and database items (ids and ancestors, in the split's order); its fit record (device,
    settings, history) is kept as results_dir/fits/NAME.json.
    """
    from shdh.steps.prepare import load_prepared
    from shdh.steps.smatrix import load_smatrix

    results_dir = Path(results_dir)
    check_outputs(results_dir, eval_params.get("report"))
    ds, split = load_prepared(prepared_dir)
    ancestors = load_smatrix(smatrix_path).ancestors
    q_idx, db_idx = split.query_idx, split.db_idx
    inputs: dict[str, np.ndarray] = {"images": ds.images}
    if features_path is not None and Path(features_path).exists():
        inputs["features"] = load_features(features_path, len(ds.ids))

    def codes_for(q: np.ndarray, db: np.ndarray, sizes, weights) -> Codes:
        return Codes(
            query_codes=pack_codes(q), db_codes=pack_codes(db), n_bits=q.shape[1],
            segment_sizes=np.asarray(sizes, dtype=np.int64),
            segment_weights=np.asarray(weights, dtype=np.float64),
            query_ancestors=ancestors[q_idx], db_ancestors=ancestors[db_idx],
            query_ids=ds.ids[q_idx], db_ids=ds.ids[db_idx],
        )  # fmt: skip

    items = {"query_ids": ds.ids[q_idx], "db_ids": ds.ids[db_idx],
             "query_ancestors": ancestors[q_idx], "db_ancestors": ancestors[db_idx]}  # fmt: skip
    split_inputs: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    scored: list[Scored] = []
    timings: dict[str, dict[str, list[dict[str, float]]]] = {}
    replicates: set[int | None] = set()
    for method, bits, *rest in runs:
        replicate = rest[0] if rest else None
        replicates.add(replicate)
        name = run_name(method, bits, replicate)
        imported = _imported_codes(codes_from, name, items)
        if imported is not None:
            codes, record = imported
            if codes.n_bits != bits:
                raise ValueError(f"{codes_from}: {name} holds {codes.n_bits}-bit codes")
            run_tags = {**(tags or {}), "trained_on": str(record.get("device", ""))}
            extra = {"encode_seconds": record.get("encode_seconds", 0.0)}
            scored.append(_score(codes, method, bits, results_dir, eval_params, None, run_tags,
                                 parent_run_id, replicate, extra=extra))  # fmt: skip
            timings.setdefault(method, {}).setdefault(str(bits), []).append(
                {"fit_seconds": record.get("fit_seconds"),
                 "encode_seconds": record.get("encode_seconds")}
            )  # fmt: skip
            atomic_write_text(results_dir / "fits" / f"{name}.json", json.dumps(record, indent=2))
            continue
        shallow = get_hasher_class(method).input_kind != "images"
        root = shallow_models_dir if shallow and shallow_models_dir is not None else models_dir
        mdir = model_dir(root, method, bits, replicate)
        hasher = Hasher.load(mdir / HASHER_DIR)
        if hasher.n_bits != bits:
            raise ValueError(f"{mdir / HASHER_DIR}: holds a {hasher.n_bits}-bit {method}, "
                             f"not {bits} bits")  # fmt: skip
        if hasher.input_kind not in inputs:
            raise ValueError(f"{method}: needs {hasher.input_kind}, which the evaluate step "
                             f"was not given (features: {features_path})")  # fmt: skip
        if hasher.input_kind not in split_inputs:  # gathered once, not once per method
            X = inputs[hasher.input_kind]
            split_inputs[hasher.input_kind] = (np.asarray(X[q_idx]), np.asarray(X[db_idx]))
        X_q, X_db = split_inputs[hasher.input_kind]
        start = time.perf_counter()
        q, db = hasher.encode(X_q), hasher.encode(X_db)
        encode_s = time.perf_counter() - start
        codes = codes_for(q, db, hasher.segment_sizes(), hasher.segment_weights())
        run_id = tracking.load_run_ref(mdir / RUN_REF, parent_run_id)
        result = _score(codes, method, bits, results_dir, eval_params, run_id, tags,
                        parent_run_id, replicate, extra={"encode_seconds": encode_s},
                        seed=fit_seed(seed, replicate))  # fmt: skip
        scored.append(result)
        timings.setdefault(method, {}).setdefault(str(bits), []).append(
            {"fit_seconds": _fit_seconds(mdir), "encode_seconds": encode_s}
        )
    if eval_params.get("random_floor", True):
        for bits in sorted({run[1] for run in runs}):
            for replicate in sorted(replicates, key=lambda r: fit_seed(seed, r)):
                base = fit_seed(seed, replicate)
                q = random_codes(len(q_idx), bits, base)
                db = random_codes(len(db_idx), bits, base + 1)
                codes = codes_for(q, db, [bits], [1.0])
                scored.append(_score(codes, "random", bits, results_dir, eval_params, None,
                                     tags, parent_run_id, replicate, seed=base))  # fmt: skip

    metrics = nested_metrics(scored)
    curves = mean_curves(scored)
    atomic_write_text(results_dir / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    atomic_write_text(results_dir / BY_SEED_FILE, json.dumps(metrics_by_seed(scored, seed),
                                                             indent=2) + "\n")  # fmt: skip
    timing = mean_timings(timings, items=len(q_idx) + len(db_idx))
    atomic_write_text(results_dir / "timings.json", json.dumps(timing, indent=2) + "\n")
    save_curves(results_dir / CURVES_FILE, curves, dataset=ds.name, n=eval_params["n"])
    atomic_write_text(results_dir / "table.md", results_table(metrics, eval_params["n"]))
    figures = write_figures(
        curves, results_dir / PLOTS_DIR, _alpha_sweep(eval_params.get("alpha_sweep"))
    )
    if eval_params.get("report"):
        write_report(eval_params["report"], metrics, figures, dataset=ds.name, n=eval_params["n"])
    return metrics


def check_outputs(results_dir: str | Path, report: str | Path | None) -> None:
    """Fail before any ranking if the results folder or the report's folder cannot be written:
    a read-only folder is named in a second, not after the whole evaluation."""
    check_writable(Path(results_dir) / "metrics.json", "evaluate.results_dir")
    if report:
        check_writable(report, "evaluate.report")


def report_from_results(
    results_dir: str | Path, report_path: str | Path, alpha_sweep: str | Path | None = None
) -> list[Figure]:
    """`shdh report`: the figures and docs/results.md's tables from a finished evaluation's
    metrics.json and curves.npz, with no ranking again (to restyle a figure, or to refresh the
    document after editing the analysis around its generated block). alpha_sweep: Fig. 5's
    runs (evaluate.alpha_sweep), drawn when the file exists."""
    results_dir = Path(results_dir)
    check_outputs(results_dir, report_path)
    metrics_path = results_dir / "metrics.json"
    try:
        metrics = json.loads(metrics_path.read_text())
    except (OSError, ValueError) as err:
        raise ValueError(
            f"{metrics_path}: cannot read the metrics ({err}); run `shdh evaluate`"
        ) from err
    curves, dataset, n = load_curves(results_dir / CURVES_FILE)
    unscored = sorted({f"{m}-{b}" for m, b in curves} - {f"{m}-{b}" for m in metrics
                                                          for b in metrics[m]})  # fmt: skip
    if unscored:
        raise ValueError(f"{metrics_path}: no metrics for {', '.join(unscored)}, which "
                         f"{results_dir / CURVES_FILE} has: the two files are from different "
                         "runs; rerun `shdh evaluate`")  # fmt: skip
    figures = write_figures(curves, results_dir / PLOTS_DIR, _alpha_sweep(alpha_sweep))
    write_report(report_path, metrics, figures, dataset=dataset, n=n)
    return figures


def _alpha_sweep(path: str | Path | None) -> list[dict[str, Any]] | None:
    """Fig. 5's runs, when a sweep was saved at evaluate.alpha_sweep. One path that every
    profile can point to, because the sweep is a separate benchmark run
    (benchmarks/shdh_vs_dpsh.py --out), not a product of the pipeline's own fits."""
    return load_alpha_sweep(path) if path is not None and Path(path).is_file() else None


def write_report(path: str | Path, metrics: dict[str, Any], figures: list[Figure], *,
                 dataset: str, n: int) -> Path:  # fmt: skip
    """Refresh the generated tables and figures of a report such as docs/results.md (the
    analysis around them is kept); figures are linked relative to the document. A new report
    is titled after the dataset and says how it is kept up to date."""
    import os

    path = Path(path)
    links = [(os.path.relpath(f.path, path.parent), f.caption) for f in figures]
    doc = results_doc(metrics, dataset=dataset, n=n, figures=links)
    intro = (
        f"Written by `shdh evaluate` for the dataset {dataset}, from the metrics.json and "
        "curves.npz in the folder of its results (`shdh report` redraws it from them). Each run "
        "rewrites the part between the two markers; text you add around it is kept.\n"
    )
    return update_generated_section(path, doc, title=f"Results: {dataset}", intro=intro)


def _imported_codes(
    codes_from: str | Path | None, name: str, items: dict[str, np.ndarray]
) -> tuple[Codes, dict[str, Any]] | None:
    """The codes and fit record of `name` in a bundle's output folder, when it has them; a file
    made from another dataset or split is refused, naming it and what differs."""
    from shdh.bundle import CODES_DIR, FITS_DIR

    if codes_from is None:
        return None
    path = Path(codes_from) / CODES_DIR / f"{name}.npz"
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
    record_path = Path(codes_from) / FITS_DIR / f"{name}.json"
    try:
        record = json.loads(record_path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{record_path}: cannot read the fit record of {path} ({err})") from err
    log.info("%s: codes trained elsewhere (%s), from %s", name, record.get("device"), path)
    return codes, record


def _fit_seconds(mdir: Path) -> float | None:
    path = mdir / "fit.json"
    return json.loads(path.read_text()).get("fit_seconds") if path.is_file() else None


def _score(
    codes: Codes,
    method: str,
    bits: int,
    results_dir: Path,
    eval_params: dict[str, Any],
    run_id: str | None,
    tags: dict[str, str] | None,
    parent_run_id: str | None,
    replicate: int | None = None,
    extra: dict[str, float] | None = None,
    seed: int = 0,
) -> Scored:
    """Write the codes file, score it, and log metrics, codes and plot to the method's run."""
    name = run_name(method, bits, replicate)
    path = results_dir / "codes" / f"{name}.npz"
    save_codes(path, codes)
    n_db = len(codes.db_ids)
    wr_ns = tuple(n for n in eval_params.get("wr_ns", (100, 1000, 5000)) if n <= n_db)
    metrics, curves = score_codes(
        codes.query_codes, codes.db_codes, codes.query_ancestors, codes.db_ancestors,
        codes.segment_sizes, codes.segment_weights, n=eval_params["n"], wr_ns=wr_ns,
        curve_max=min(eval_params.get("curve_max", 5000), n_db),
        workers=eval_workers(eval_params.get("workers")),
        radius_queries=eval_params.get("radius_queries"),
    )  # fmt: skip
    result = Scored(method, bits, metrics, curves, path, replicate)
    log.info("%s: %s", name, json.dumps({k: round(v, 4) for k, v in metrics.items()}))
    with tracking.run(
        run_name=tracking.child_run_name(method, bits, seed), run_id=run_id,
        parent_run_id=parent_run_id,
        params=None if run_id else {"method": method, "bits": bits, "seed": seed},
        tags={"method": method, "bits": str(bits), **(tags or {})},
    ):  # fmt: skip
        tracking.log_metrics({**metrics, **(extra or {})})
        tracking.log_artifact(path, "codes")
        with tempfile.TemporaryDirectory() as tmp:  # for the run page only; results/ has Fig. 3
            plot = Path(tmp) / f"{name}-wr.png"
            wr_at_n_figure(
                {method: result.curves}, plot, title=f"{name.replace('-', ', ', 1)} bits"
            )
            tracking.log_artifact(plot, "plots")
    return result


def eval_workers(value: int | None) -> int:
    """Ranking threads: null in params.yaml means one per CPU this process may use (ranking
    releases the GIL): the container's CPU limit in a pod, else the cores it may run on."""
    if value is None:
        from shdh.cpu_limit import available_cpus

        return available_cpus()
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"params.yaml: evaluate.workers: expected a positive int or null, "
                         f"got {value!r}")  # fmt: skip
    return value


def _groups(scored: list[Scored]) -> dict[tuple[str, int], list[Scored]]:
    """The fits of each (method, bits), over their seeds, in scoring order."""
    groups: dict[tuple[str, int], list[Scored]] = {}
    for s in scored:
        groups.setdefault((s.method, s.bits), []).append(s)
    return groups


def nested_metrics(scored: list[Scored]) -> dict[str, Any]:
    """{method: {bits: {metric: value}}}, the layout of metrics.json: the mean over the seeds,
    and, where there are several, METRIC_sd (the sample standard deviation) and `seeds`."""
    out: dict[str, Any] = {}
    for (method, bits), fits in _groups(scored).items():
        row: dict[str, float] = {}
        for key in fits[0].metrics:
            values = [float(f.metrics[key]) for f in fits]
            row[key] = round(statistics.fmean(values), 6)
            if len(fits) > 1:
                row[f"{key}_sd"] = round(statistics.stdev(values), 6)
        if len(fits) > 1:
            row["seeds"] = len(fits)
        out.setdefault(method, {})[str(bits)] = row
    return out


def metrics_by_seed(scored: list[Scored], seed: int) -> dict[str, Any]:
    """{method: {bits: {seed: {metric: value}}}}: every fit's own figures (metrics_by_seed.json),
    from which metrics.json's means and spreads are computed."""
    out: dict[str, Any] = {}
    for s in scored:
        used = fit_seed(seed, s.replicate)
        out.setdefault(s.method, {}).setdefault(str(s.bits), {})[str(used)] = {
            k: round(float(v), 6) for k, v in s.metrics.items()
        }
    return out


def mean_curves(scored: list[Scored]) -> dict[tuple[str, int], Curves]:
    """Each (method, bits)'s curves averaged over its seeds (the figures show the mean). The
    radius axis is the same for every seed: it is set by the segment sizes and weights."""
    out = {}
    for key, fits in _groups(scored).items():
        first = fits[0].curves
        if any(not np.array_equal(f.curves.radius, first.radius) for f in fits):
            raise ValueError(f"{run_name(*key)}: the seeds' codes have different radius axes")
        out[key] = Curves(
            wr_at_n=np.mean([f.curves.wr_at_n for f in fits], axis=0),
            radius=first.radius,
            radius_real=first.radius_real,
            wr_at_radius=np.mean([f.curves.wr_at_radius for f in fits], axis=0),
        )
    return out


def mean_timings(timings: dict[str, dict[str, list[dict]]], items: int) -> dict[str, Any]:
    """timings.json: fit and encode seconds per method and code length, the mean over seeds."""

    def mean(values: list[float | None]) -> float | None:
        known = [v for v in values if v is not None]
        return round(statistics.fmean(known), 3) if known else None

    return {
        method: {
            bits: {
                "fit_seconds": mean([r["fit_seconds"] for r in rows]),
                "encode_seconds": mean([r["encode_seconds"] for r in rows]),
                "items_encoded": items,
                **({"seeds": len(rows)} if len(rows) > 1 else {}),
            }
            for bits, rows in by_bits.items()
        }
        for method, by_bits in timings.items()
    }


def metrics_of_codes_file(path: str | Path, *, n: int = 100) -> dict[str, float]:
    """`shdh metrics`: score any codes file, whatever tool made it."""
    from shdh.codes import evaluate_codes_file

    return evaluate_codes_file(path, n=n)
