"""The train step: fit one method at one code length on the training pool, tracked in MLflow.

Every method, deep or shallow, goes through the same function: the same training items (a
seeded prefix of the database order), the same pair labels from the S-matrix artifact (in the
mode the method asks for), and the same record (a saved hasher, its fit time, its MLflow run).
What differs is only the input: uint8 images for deep methods, GIST features for shallow ones.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from shdh import tracking
from shdh.atomic import atomic_path, atomic_write_text
from shdh.config import ConfigError, flatten
from shdh.hashers import get_hasher_class
from shdh.hashers.base import Hasher
from shdh.hashers.supervision import PairSimilarity

log = logging.getLogger(__name__)

RESUME_MODES = ("never", "auto", "always")
HASHER_DIR = "hasher"  # inside a model folder: params.json + state.npz
RUN_REF = "mlflow_run.json"
FIT_RECORD = "fit.json"
WORK_DIR = "work"  # inside a deep model folder: the checkpoint and its run record
ENCODER_EXAMPLE_ITEMS = 2  # training images stored with a logged encoder as its input example
# Keys of the `train` section that configure the pipeline rather than a method.
_PIPELINE_KEYS = ("methods", "bits", "models_dir", "n_train", "seeds")


def run_name(method: str, bits: int, replicate: int | None = None) -> str:
    """METHOD-BITS, or METHOD-BITS-seedS for one of several fits that differ only by seed: the
    name of the model folder, the MLflow run and the codes file."""
    return f"{method}-{bits}" if replicate is None else f"{method}-{bits}-seed{replicate}"


def model_dir(models_dir: str | Path, method: str, bits: int, replicate: int | None = None) -> Path:
    """models_dir/METHOD/METHOD-BITS[-seedS]: one folder per method (a DVC stage's output), one
    per code length (and seed) inside it (self-describing when copied out on its own)."""
    return Path(models_dir) / method / run_name(method, bits, replicate)


def replicate_seeds(section: dict[str, Any]) -> list[int | None]:
    """The seeds a section's methods are fitted with: `seeds: null` is one fit with the master
    seed, named without it; a list is one fit per seed, each named with its seed, so the tables
    can report the mean and spread. The split and the S-matrix sample stay the master seed's:
    the seeds vary initialisation, sampling and shuffling, not the data."""
    seeds = section.get("seeds")
    if seeds is None:
        return [None]
    if (
        not isinstance(seeds, list)
        or not seeds
        or any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seeds)
        or len(set(seeds)) != len(seeds)
    ):
        raise ConfigError(
            f"params.yaml: seeds: expected null or a list of distinct non-negative ints, "
            f"got {seeds!r}"
        )
    return list(seeds)


def fit_seed(seed: int, replicate: int | None) -> int:
    """The seed a fit actually uses: its replicate's own seed, else the master seed. Training,
    the random floor and metrics_by_seed.json all key a fit by it."""
    return seed if replicate is None else replicate


def method_params(section: dict[str, Any], method: str) -> dict[str, Any]:
    """Constructor arguments for `method` from its params.yaml section.

    Deep methods share the backbone and loop settings of `train` plus their own sub-mapping
    (`train.shdh`, `train.dpsh`); shallow ones take only their sub-mapping of `baselines`.
    Keys the method's constructor does not take are refused by name, so a typo cannot be
    silently ignored.
    """
    import inspect

    cls = get_hasher_class(method)
    accepted = {
        p.name
        for p in inspect.signature(cls.__init__).parameters.values()
        if p.kind is inspect.Parameter.KEYWORD_ONLY
    } - {"n_bits", "seed", "work_dir"}
    own = section.get(method) or {}
    if not isinstance(own, dict):
        raise ConfigError(f"params.yaml: '{method}' settings must be a mapping, got {own!r}")
    shared = {}
    if cls.input_kind == "images":
        skip = set(_PIPELINE_KEYS) | {m for m in section if isinstance(section[m], dict)}
        shared = {k: v for k, v in section.items() if k not in skip and k in accepted}
    unknown = sorted(set(own) - accepted)
    if unknown:
        raise ConfigError(f"params.yaml: {method}: unknown settings {unknown}")
    if cls.input_kind == "images":
        strays = sorted(set(section) - skip - accepted)
        if strays:
            raise ConfigError(f"params.yaml: train: settings {strays} are not {method}'s")
    return {**shared, **own}


def training_inputs(
    cls: type[Hasher],
    prepared_dir: Path,
    smatrix_path: Path,
    features_path: Path | None,
    n_train: int | None,
) -> tuple[np.ndarray, PairSimilarity]:
    """(X, pairs) for the training pool: images or GIST rows, and the S-matrix's pair labels."""
    from shdh.data.splits import training_subset
    from shdh.steps import load_prepared, load_smatrix

    ds, split = load_prepared(prepared_dir)
    s = load_smatrix(smatrix_path)
    train_idx = np.sort(training_subset(split, n_train))
    pairs = PairSimilarity(s.ancestors[train_idx], s.weights, cls.supervision or "label")
    if cls.input_kind == "images":
        return np.asarray(ds.images[train_idx]), pairs
    if features_path is None:
        raise ConfigError(f"{cls.name}: needs GIST features (run the features step first)")
    return load_features(features_path, len(ds.ids))[train_idx], pairs


def load_features(path: str | Path, n_items: int) -> np.ndarray:
    path = Path(path)
    try:
        features = np.load(path, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: cannot read the features: {exc}") from exc
    if features.ndim != 2 or len(features) != n_items:
        raise ValueError(f"{path}: features have shape {features.shape}, expected ({n_items}, d)")
    return features


def train(
    method: str,
    bits: int,
    *,
    prepared_dir: str | Path,
    smatrix_path: str | Path,
    models_dir: str | Path,
    section: dict[str, Any],
    features_path: str | Path | None = None,
    seed: int = 0,
    replicate: int | None = None,
    resume: str = "never",
    progress: bool = True,
    tags: dict[str, str] | None = None,
    parent_run_id: str | None = None,
) -> Path:
    """Fit `method` at `bits` and save it under models_dir/METHOD/METHOD-BITS/.

    replicate: fit with this seed instead of `seed`, named METHOD-BITS-seedS (replicate_seeds).

    resume (deep methods): "never" starts afresh; "always" continues the checkpoint and fails if
    it does not match; "auto" continues a matching checkpoint and starts afresh otherwise (what
    `dvc repro` uses, so an interrupted pipeline picks up where it stopped).
    """
    if resume not in RESUME_MODES:
        raise ConfigError(f"--resume: expected one of {RESUME_MODES}, got '{resume}'")
    cls = get_hasher_class(method)
    params = method_params(section, method)
    seed = fit_seed(seed, replicate)
    name = run_name(method, bits, replicate)
    out_dir = model_dir(models_dir, method, bits, replicate)
    X, pairs = training_inputs(
        cls, Path(prepared_dir), Path(smatrix_path),
        Path(features_path) if features_path else None, section.get("n_train"),
    )  # fmt: skip
    deep = cls.input_kind == "images"
    if deep:
        params["work_dir"] = str(out_dir / WORK_DIR)
    hasher = cls(n_bits=bits, seed=seed, **params)
    log.info("%s: fitting on %d items", name, len(X))
    shared_from = None
    if deep and resume != "never":
        shared_from = _share_checkpoint(hasher, X, pairs, out_dir)
    started = {"checkpoint_from": shared_from} if shared_from else {}  # fit.json and MLflow tags

    run_id = (tracking.load_run_ref(out_dir / RUN_REF, parent_run_id)
              if deep and resume != "never" else None)  # fmt: skip
    logged = {
        **flatten(params),
        "method": method,
        "bits": bits,
        "seed": seed,
        "n_train_items": len(X),
        "segment_sizes": hasher_segments(hasher, pairs),
    }
    run_tags = {"method": method, "bits": str(bits), **started, **(tags or {})}
    with tracking.run(
        run_name=tracking.child_run_name(method, bits, seed),
        params=None if run_id else logged,
        tags=run_tags,
        run_id=run_id,
        parent_run_id=parent_run_id,
    ) as active:
        out_dir.mkdir(parents=True, exist_ok=True)
        tracking.save_run_ref(out_dir / RUN_REF, active)
        start = time.perf_counter()
        if deep:
            mode = {"never": False, "always": True, "auto": "auto"}[resume]
            hasher.fit(
                X,
                pairs,
                resume=mode,
                progress=progress,
                on_epoch=_epoch_logger(name, hasher.epochs),
            )
        else:
            hasher.fit(X, pairs)
        seconds = time.perf_counter() - start
        hasher.save(out_dir / HASHER_DIR)
        tracking.log_metrics({"fit_seconds": seconds})
        if deep:
            tracking.log_artifact(out_dir / WORK_DIR / "checkpoint.pt", "checkpoint")
            # The encoder as an MLflow model (images -> packed codes), servable and registrable.
            tracking.log_encoder(out_dir / HASHER_DIR, X[:ENCODER_EXAMPLE_ITEMS])
            history = json.dumps(hasher.history_, indent=2) + "\n"
            atomic_write_text(out_dir / "history.json", history)
    record = {
        "method": method,
        "bits": bits,
        "replicate": replicate,
        "seed": seed,
        "fit_seconds": round(seconds, 3),
        "n_train_items": len(X),
        **started,
    }
    atomic_write_text(out_dir / FIT_RECORD, json.dumps(record, indent=2) + "\n")
    log.info("%s: fitted in %.1f s, saved to %s", name, seconds, out_dir)
    return out_dir


def _share_checkpoint(
    hasher: Hasher, X: np.ndarray, pairs: PairSimilarity, out_dir: Path
) -> str | None:
    """Start this fit from the training of the same method at another code length, when the
    method's training does not depend on the length (code_only_params names n_bits: the
    classifier oracle) and that training was made with every other parameter, the seed and the
    data of this one. Training again would repeat it exactly, at the full cost of a deep fit.

    Copies the sibling's checkpoint and run record into this fit's work folder (temporary
    names, then rename); the fit then resumes it as it would its own, so an unfinished sibling
    is continued to the configured epochs. A checkpoint of this fit's own that matches comes
    first. Returns the sibling's run name, or None."""
    if "n_bits" not in hasher.code_only_params:
        return None
    work = out_dir / WORK_DIR
    siblings = sorted(p for p in out_dir.parent.glob("*") if p.is_dir() and p != out_dir)
    found = hasher.first_trained_as_here([work, *(s / WORK_DIR for s in siblings)], X, pairs)
    if found is None or found == work:
        return None
    for name in hasher.training_files:
        with atomic_path(work / name) as tmp:
            shutil.copyfile(found / name, tmp)
    sibling = found.parent.name
    log.info("%s: starting from the training of %s (the code length does not change it)",
             out_dir.name, sibling)  # fmt: skip
    return sibling


def hasher_segments(hasher: Hasher, pairs: PairSimilarity) -> list[int]:
    """The code layout a hasher will have, known before fitting (for the run's params)."""
    if getattr(hasher, "layout", None) is None:
        return [hasher.n_bits]
    from shdh.hierarchy import segment_sizes

    return segment_sizes(hasher.n_bits, pairs.ancestors.shape[1], hasher.layout)


def _epoch_logger(name: str, epochs: int):
    def on_epoch(entry: dict[str, Any]) -> None:
        log.info(
            "%s epoch %d/%d: loss %.4f, %.0f img/s, |z| %.2f, %.1f%% bits flipped",
            name, entry["epoch"], epochs, entry["loss"], entry["images_per_sec"],
            entry["mean_abs_z"], 100 * entry["flip_fraction"],
        )  # fmt: skip
        tracking.log_metrics(
            {k: v for k, v in entry.items() if k != "epoch"}, step=int(entry["epoch"])
        )

    return on_epoch
