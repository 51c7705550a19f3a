"""One function per pipeline step: the library calls behind DVC stages, the CLI and Kubeflow.

Each step reads its inputs from paths, validates them, and writes its outputs atomically. The
DVC stages (dvc.yaml), `shdh <step>` and the Kubeflow components are thin shells over these
functions, so every front door runs exactly the same code.

    fetch -> download -> tree -> smatrix -> train@method-bits -> evaluate
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shdh import tracking
from shdh.atomic import atomic_dir, atomic_write_text
from shdh.config import ConfigError, flatten
from shdh.hierarchy import (
    LabelTree,
    builtin_tree,
    segment_levels,
    segment_sizes,
    segment_weights,
)

log = logging.getLogger(__name__)

DATASETS = ("fashion-mnist-h",)
TREE_FILE = "tree.json"
ANCESTORS_FILE = "ancestors.npy"
SPLIT_FILE = "split.npz"
RESUME_MODES = ("never", "auto", "always")


# --------------------------------------------------------------------------- data


def fetch(
    raw_dir: str | Path,
    *,
    dataset: str = "fashion-mnist-h",
    sources=("debian", "official"),
    verify: bool = True,
) -> Path:
    """Bring the raw files into raw_dir, verified; files already there and intact are kept."""
    _check_dataset(dataset)
    from shdh.data.fashion_mnist import fetch_raw

    return fetch_raw(raw_dir, sources=tuple(sources), verify=verify)


def download(
    raw_dir: str | Path,
    out_dir: str | Path,
    *,
    dataset: str = "fashion-mnist-h",
    query_fraction: float = 0.1,
    max_items: int | None = None,
    seed: int = 0,
) -> Path:
    """Convert the raw files to the project's format and make the paper's query/database split.

    The split pools every item (train and test alike, as the paper does), takes
    `query_fraction` as queries and keeps the rest, in a seeded random order, as the database
    and training pool. `max_items` keeps a seeded random subset, for quick runs.
    """
    _check_dataset(dataset)
    from shdh.data.dataset import Dataset, fashion_mnist_h_dataset, save_dataset
    from shdh.data.splits import make_split, save_split

    ds = fashion_mnist_h_dataset(raw_dir)
    if max_items is not None and max_items < len(ds.ids):
        keep = np.sort(np.random.default_rng(seed).choice(len(ds.ids), max_items, replace=False))
        ds = Dataset(
            images=np.asarray(ds.images[keep]),
            labels=ds.labels[keep],
            ids=ds.ids[keep],
            name=ds.name,
        )
    split = make_split(len(ds.ids), query_fraction=query_fraction, seed=seed)
    out_dir = Path(out_dir)
    with atomic_dir(out_dir) as tmp:
        save_dataset(ds, tmp / "dataset")
        save_split(split, tmp / SPLIT_FILE)
    log.info(
        "wrote %s: %d items, %d queries, %d database",
        out_dir,
        len(ds.ids),
        len(split.query_idx),
        len(split.db_idx),
    )
    return out_dir


def _check_dataset(dataset: str) -> None:
    if dataset not in DATASETS:
        raise ConfigError(
            f"data.dataset: unknown dataset '{dataset}' (known: {', '.join(DATASETS)})"
        )


def load_prepared(prepared_dir: str | Path):
    """The dataset and split written by `download`."""
    from shdh.data.dataset import load_dataset
    from shdh.data.splits import load_split

    prepared_dir = Path(prepared_dir)
    ds = load_dataset(prepared_dir / "dataset")
    split = load_split(prepared_dir / SPLIT_FILE, n_items=len(ds.ids))
    return ds, split


# --------------------------------------------------------------------------- tree, S


def load_tree_source(source: str) -> LabelTree:
    """`builtin:NAME` or a path to a tree JSON file (LabelTree.save format)."""
    if source.startswith("builtin:"):
        return builtin_tree(source.removeprefix("builtin:"))
    return LabelTree.load(source)


def tree(prepared_dir: str | Path, out_dir: str | Path, *, source: str) -> Path:
    """Map every item's leaf label path onto the label tree: the N x K ancestor matrix."""
    from shdh.data.dataset import load_dataset

    label_tree = load_tree_source(source)
    ds = load_dataset(Path(prepared_dir) / "dataset")
    ancestors = label_tree.ancestors_of_labels(list(ds.labels))
    with atomic_dir(out_dir) as tmp:
        label_tree.save(tmp / TREE_FILE)
        np.save(tmp / ANCESTORS_FILE, ancestors)
    log.info(
        "wrote %s: K=%d, %d nodes, %d items",
        out_dir,
        label_tree.height,
        label_tree.n_nodes,
        len(ancestors),
    )
    return Path(out_dir)


def load_tree(tree_dir: str | Path) -> tuple[LabelTree, np.ndarray]:
    tree_dir = Path(tree_dir)
    label_tree = LabelTree.load(tree_dir / TREE_FILE)
    path = tree_dir / ANCESTORS_FILE
    try:
        ancestors = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read the ancestor matrix: {exc}") from exc
    if ancestors.ndim != 2 or ancestors.shape[1] != label_tree.height:  # hand-edited files
        raise ValueError(
            f"{path}: ancestors have shape {ancestors.shape}, expected (N, "
            f"{label_tree.height}) for the tree in {tree_dir / TREE_FILE}"
        )
    return label_tree, ancestors


def smatrix(
    tree_dir: str | Path,
    out: str | Path,
    *,
    prepared_dir: str | Path,
    sample_size: int = 2000,
    seed: int = 0,
) -> Path:
    """The compact S artifact (Eq. 3 by shared depth) plus a dense block for a sample.

    The sample comes from the database (the training pool), never from the queries.
    """
    from shdh.data.splits import load_split
    from shdh.similarity import build_smatrix

    label_tree, ancestors = load_tree(tree_dir)
    split = load_split(Path(prepared_dir) / SPLIT_FILE, n_items=len(ancestors))
    s = build_smatrix(
        ancestors,
        label_tree.layer_weights(),
        sample_size=sample_size,
        seed=seed,
        pool=split.db_idx,
    )
    s.save(out)
    log.info(
        "wrote %s: N=%d, K=%d, sample %d", out, s.n_items, label_tree.height, len(s.sample_idx)
    )
    return Path(out)


# --------------------------------------------------------------------------- train


def model_dir(models_dir: str | Path, method: str, bits: int) -> Path:
    return Path(models_dir) / f"{method}-{bits}"


def train_config(train_params: dict[str, Any], *, bits: int, seed: int):
    """TrainConfig from the `train` section of params.yaml; unknown keys are refused by name."""
    from dataclasses import fields

    from shdh.training import TrainConfig

    names = {f.name for f in fields(TrainConfig)}
    pipeline_keys = {"methods", "bits", "models_dir", "n_train"}
    unknown = set(train_params) - names - pipeline_keys
    if unknown:
        raise ConfigError(f"params.yaml: train: unknown keys {sorted(unknown)}")
    values = {k: v for k, v in train_params.items() if k in names}
    return TrainConfig(**{**values, "n_bits": bits, "seed": seed})


def load_smatrix(path: str | Path):
    from shdh.similarity import SMatrix

    return SMatrix.load(path)


def train(
    method: str,
    bits: int,
    *,
    prepared_dir: str | Path,
    smatrix_path: str | Path,
    models_dir: str | Path,
    train_params: dict[str, Any],
    seed: int = 0,
    resume: str = "never",
    progress: bool = True,
    tags: dict[str, str] | None = None,
) -> Path:
    """Train one deep hasher at one code length and track it in MLflow.

    resume: "never" starts afresh; "always" requires the checkpoint; "auto" continues a
    checkpoint whose settings match and starts afresh otherwise (what `dvc repro` uses, so an
    interrupted pipeline picks up where it stopped).
    """
    from shdh.data.splits import training_subset
    from shdh.training import train as train_loop

    if method != "shdh":
        raise ConfigError(f"train.methods: unknown deep method '{method}' (known: shdh)")
    ds, split = load_prepared(prepared_dir)
    s = load_smatrix(smatrix_path)
    ancestors, K = s.ancestors, s.ancestors.shape[1]
    config = train_config(train_params, bits=bits, seed=seed)
    sizes = segment_sizes(bits, K, config.layout)
    out_dir = model_dir(models_dir, method, bits)
    train_idx = training_subset(split, train_params.get("n_train"))
    if resume not in RESUME_MODES:
        raise ConfigError(f"--resume: expected one of {RESUME_MODES}, got '{resume}'")
    do_resume = {"never": False, "always": True, "auto": "auto"}[resume]

    params = {
        **flatten({"train": train_params}),
        "method": method,
        "bits": bits,
        "seed": seed,
        "n_train_items": len(train_idx),
        "K": K,
        "segment_sizes": sizes,
    }
    run_tags = {
        "method": method,
        "bits": str(bits),
        "git_commit": tracking.git_commit(),
        **(tags or {}),
    }
    run_id = tracking.load_run_ref(out_dir / "mlflow_run.json") if do_resume else None
    with tracking.run(
        run_name=f"{method}-{bits}", params=None if run_id else params, tags=run_tags, run_id=run_id
    ) as active:
        out_dir.mkdir(parents=True, exist_ok=True)
        tracking.save_run_ref(out_dir / "mlflow_run.json", active)

        def on_epoch(entry: dict[str, Any]) -> None:
            log.info(
                "%s-%d epoch %d/%d: loss %.4f, %.0f img/s, |z| %.2f, %.1f%% bits flipped",
                method, bits, entry["epoch"], config.epochs, entry["loss"],
                entry["images_per_sec"], entry["mean_abs_z"], 100 * entry["flip_fraction"],
            )  # fmt: skip
            tracking.log_metrics(
                {k: v for k, v in entry.items() if k != "epoch"}, step=int(entry["epoch"])
            )

        result = train_loop(
            config,
            ds.images,
            ancestors,
            train_idx,
            out_dir,
            segment_sizes=sizes,
            segment_levels=segment_levels(K, config.layout),
            layer_weights=s.weights,
            resume=do_resume,
            progress=progress,
            on_epoch=on_epoch,
        )
        tracking.log_artifact(result.checkpoint_path, "checkpoint")
    atomic_write_text(out_dir / "history.json", json.dumps(result.history, indent=2) + "\n")
    return out_dir


# --------------------------------------------------------------------------- evaluate


@dataclass
class Scored:
    method: str
    bits: int
    metrics: dict[str, float]
    curves: Any
    codes_path: Path


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
    methods: list[str],
    bits: list[int],
    eval_params: dict[str, Any],
    seed: int = 0,
    layout: str = "levels",
    device: str = "auto",
    tags: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Encode queries and database with every trained model, score them, write the results.

    Outputs in results_dir: codes/METHOD-BITS.npz (the codes-file contract), metrics.json
    ({method: {bits: {metric: value}}}), plots/wr_at_n-BITS.png and table.md.
    """
    from shdh.codes import Codes
    from shdh.retrieval import pack_codes
    from shdh.training import encode, load_checkpoint

    ds, split = load_prepared(prepared_dir)
    ancestors = load_smatrix(smatrix_path).ancestors
    K = ancestors.shape[1]
    results_dir = Path(results_dir)
    q_idx, db_idx = split.query_idx, split.db_idx
    q_images, db_images = np.asarray(ds.images[q_idx]), np.asarray(ds.images[db_idx])

    def codes_for(method: str, n_bits: int, q: np.ndarray, db: np.ndarray, sizes, weights):
        return Codes(
            query_codes=pack_codes(q),
            db_codes=pack_codes(db),
            n_bits=n_bits,
            segment_sizes=np.asarray(sizes, dtype=np.int64),
            segment_weights=np.asarray(weights, dtype=np.float64),
            query_ancestors=ancestors[q_idx],
            db_ancestors=ancestors[db_idx],
            query_ids=ds.ids[q_idx],
            db_ids=ds.ids[db_idx],
        )

    scored: list[Scored] = []
    for n_bits in bits:
        for method in methods:
            mdir = model_dir(models_dir, method, n_bits)
            model, config, _ = load_checkpoint(mdir / "checkpoint.pt")
            q = encode(model, q_images, device=device)
            db = encode(model, db_images, device=device)
            codes = codes_for(
                method, n_bits, q, db, model.segment_sizes, segment_weights(K, config.layout)
            )
            scored.append(
                _score(
                    codes,
                    method,
                    n_bits,
                    results_dir,
                    eval_params,
                    tracking.load_run_ref(mdir / "mlflow_run.json"),
                    tags,
                )
            )
        if eval_params.get("random_floor", True):
            q = random_codes(len(q_idx), n_bits, seed)
            db = random_codes(len(db_idx), n_bits, seed + 1)
            codes = codes_for("random", n_bits, q, db, [n_bits], [1.0])
            scored.append(_score(codes, "random", n_bits, results_dir, eval_params, None, tags))

    metrics = _nested_metrics(scored)
    atomic_write_text(results_dir / "metrics.json", json.dumps(metrics, indent=2) + "\n")
    from shdh.report import results_table, wr_plot

    for n_bits in bits:
        wr_plot(
            [s for s in scored if s.bits == n_bits],
            results_dir / "plots" / f"wr_at_n-{n_bits}.png",
            title=f"{n_bits} bits",
        )
    atomic_write_text(results_dir / "table.md", results_table(metrics, eval_params["n"]))
    return metrics


def _score(
    codes,
    method: str,
    n_bits: int,
    results_dir: Path,
    eval_params: dict[str, Any],
    run_id: str | None,
    tags: dict[str, str] | None,
) -> Scored:
    from shdh.codes import save_codes
    from shdh.metrics import evaluate as evaluate_codes
    from shdh.report import wr_plot

    path = results_dir / "codes" / f"{method}-{n_bits}.npz"
    save_codes(path, codes)
    n_db = len(codes.db_ids)
    wr_ns = tuple(n for n in eval_params.get("wr_ns", (100, 1000, 5000)) if n <= n_db)
    metrics, curves = evaluate_codes(
        codes.query_codes,
        codes.db_codes,
        codes.query_ancestors,
        codes.db_ancestors,
        codes.segment_sizes,
        codes.segment_weights,
        n=eval_params["n"],
        wr_ns=wr_ns,
        curve_max=min(eval_params.get("curve_max", 5000), n_db),
    )
    result = Scored(method, n_bits, metrics, curves, path)
    log.info("%s-%d: %s", method, n_bits, json.dumps(metrics))
    with tracking.run(
        run_name=f"{method}-{n_bits}",
        run_id=run_id,
        params=None if run_id else {"method": method, "bits": n_bits},
        tags={"method": method, "bits": str(n_bits), **(tags or {})},
    ):
        tracking.log_metrics(metrics)
        tracking.log_artifact(path, "codes")
        plot = results_dir / "plots" / f"{method}-{n_bits}-wr.png"
        wr_plot([result], plot, title=f"{method}, {n_bits} bits")
        tracking.log_artifact(plot, "plots")
    return result


def _nested_metrics(scored: list[Scored]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for s in scored:
        out.setdefault(s.method, {})[str(s.bits)] = {
            k: round(float(v), 6) for k, v in s.metrics.items()
        }
    return out


def metrics_of_codes_file(path: str | Path, *, n: int = 100) -> dict[str, float]:
    """`shdh metrics`: score any codes file, whatever tool made it."""
    from shdh.codes import evaluate_codes_file

    return evaluate_codes_file(path, n=n)
