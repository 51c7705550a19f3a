"""Train on one machine, score on another: a run's prepared data as one file, and the deep
methods trained from it into codes files.

A GPU machine is often a bare box: PyTorch and numpy, no MLflow or DVC, and a narrow way for
files in and out. So the pipeline's prepared data travels as one compressed bundle (write_bundle:
the uint8 images, the ancestor matrix, the item ids, the seeded split, the level weights u_k and
the run's settings; Fashion-MNIST-H is about 31 MB), and the GPU side (train_bundle, or
`python -m shdh.bundle train BUNDLE --out DIR` with only `src/` on the path) trains what the
settings ask for and writes one codes file per fit (docs/codes-format.md, 0.6 MB at 64 bits)
plus a fit record with its history, its time, the device and the settings. That folder packs
into one archive; checkpoints go to a work folder beside it, so that an interrupted run
resumes. `shdh evaluate --codes-from DIR` then scores the codes wherever the full install is,
into results/ and the report like the pipeline's own codes.

The fits are the pipeline's own: planned by shdh.plan.all_methods (the same parameters, seeds and
names; their work folders laid out as model folders under the work folder) and trained by the same
fit runner (shdh.steps.fit: the same training items, the sorted prefix of the seeded database
order, and the same pair labels), so on the CPU a bundle fit gives the codes `shdh train` +
`shdh evaluate` give, bit for bit.
"""

from __future__ import annotations

import argparse
import json
import logging
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from shdh.core.codes_file import CODES_DIR, FITS_DIR, Codes, save_codes
from shdh.data.download import sha256sum
from shdh.data.splits import Split
from shdh.hashers import hasher_class
from shdh.hashers.deep_record import flat_params
from shdh.hashers.method_catalogue import method
from shdh.plan.all_methods import section_fits
from shdh.plan.fits import Fit
from shdh.plan.overrides import apply_overrides
from shdh.ranking.exact import pack_codes
from shdh.runtime import instruction_set, source_fingerprint
from shdh.runtime.atomic import atomic_path, atomic_write_text
from shdh.runtime.devices import resolve_device
from shdh.runtime.errors import ConfigError, whole_number
from shdh.steps.fit import Training, run_fit, training_items
from shdh.training.loop_settings import RUNTIME_FIELDS

log = logging.getLogger(__name__)

MANIFEST = "bundle.json"  # what the folder was trained from, and where


class BundleError(ValueError):
    """A bundle file that is missing, unreadable or lacks a key of the right shape."""


@dataclass
class Bundle:
    images: np.ndarray  # uint8 (N, H, W) or (N, H, W, C)
    ancestors: np.ndarray  # int (N, K), or (N, K, M) ancestor sets, -1 padded
    ids: np.ndarray  # (N,) item ids
    query_idx: np.ndarray  # int64, the seeded split's queries, in its order
    db_idx: np.ndarray  # int64, its database (and training pool), in its order
    layer_weights: np.ndarray  # float64 (K,), u_k of Eq. 2
    settings: dict[str, Any]  # {"train": section, "seed": int, "dataset": str, "profile": str}
    sha256: str = ""  # of the file, recorded with every fit trained from it


def write_bundle(path: str | Path, bundle: Bundle) -> Path:
    """Validate, then write the bundle compressed and atomically (temporary name, rename)."""
    path = Path(path)
    arrays = _arrays(bundle)
    _validate(arrays, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(path) as tmp, open(tmp, "xb") as f:
        np.savez_compressed(f, **arrays)
    return path


def export_bundle(
    prepared_dir: str | Path, smatrix_path: str | Path, out: str | Path, settings: dict[str, Any]
) -> Path:
    """The bundle of a pipeline run, from its download and smatrix outputs."""
    from shdh.steps.prepare import load_prepared  # the pipeline side: full install
    from shdh.steps.smatrix import load_smatrix

    ds, split = load_prepared(prepared_dir)
    s = load_smatrix(smatrix_path)
    bundle = Bundle(
        images=np.asarray(ds.images),
        ancestors=np.asarray(s.ancestors),
        ids=np.asarray(ds.ids),
        query_idx=np.asarray(split.query_idx, dtype=np.int64),
        db_idx=np.asarray(split.db_idx, dtype=np.int64),
        layer_weights=np.asarray(s.weights, dtype=np.float64),
        settings={**settings, "dataset": ds.name},
    )
    return write_bundle(out, bundle)


def read_bundle(path: str | Path) -> Bundle:
    """Read and validate a bundle; any problem raises BundleError naming the file and key."""
    path = Path(path)
    if not path.is_file():
        raise BundleError(f"{path}: no such bundle file")
    try:
        with np.load(path, allow_pickle=False) as data:
            arrays = {key: data[key] for key in data.files}
    except Exception as err:  # zipfile, zlib and numpy raise several types for a bad file
        raise BundleError(
            f"{path}: not a readable .npz bundle ({type(err).__name__}: {err})"
        ) from err
    _validate(arrays, path)
    try:
        settings = json.loads(str(arrays["settings"]))
    except json.JSONDecodeError as err:
        raise BundleError(f"{path}: key 'settings': not JSON ({err})") from err
    if not isinstance(settings, dict) or not isinstance(settings.get("train"), dict):
        raise BundleError(f"{path}: key 'settings': needs a 'train' mapping")
    fields = {k: arrays[k] for k in _KEYS if k != "settings"}
    return Bundle(**fields, settings=settings, sha256=sha256sum(path))


_KEYS = ("images", "ancestors", "ids", "query_idx", "db_idx", "layer_weights", "settings")


def _arrays(bundle: Bundle) -> dict[str, np.ndarray]:
    arrays = {k: getattr(bundle, k) for k in _KEYS if k != "settings"}
    arrays["settings"] = np.asarray(json.dumps(bundle.settings, sort_keys=True))
    return arrays


def _validate(arrays: dict[str, np.ndarray], path: Path) -> None:
    missing = [k for k in _KEYS if k not in arrays]
    if missing:
        raise BundleError(f"{path}: missing keys {missing}")

    def bad(key: str, problem: str) -> BundleError:
        return BundleError(f"{path}: key '{key}': {problem}")

    images, anc, ids = arrays["images"], arrays["ancestors"], arrays["ids"]
    if images.dtype != np.uint8 or images.ndim not in (3, 4):
        raise bad("images", f"expected uint8 (N, H, W[, C]), got {images.dtype} {images.shape}")
    n = len(images)
    if not np.issubdtype(anc.dtype, np.integer) or anc.ndim not in (2, 3) or len(anc) != n:
        raise bad("ancestors", f"expected ints ({n}, K[, M]), got {anc.dtype} {anc.shape}")
    if ids.ndim != 1 or len(ids) != n or ids.dtype == object:
        raise bad("ids", f"expected ({n},) ids, got {ids.dtype} {ids.shape}")
    for key in ("query_idx", "db_idx"):
        idx = arrays[key]
        if not np.issubdtype(idx.dtype, np.integer) or idx.ndim != 1 or len(idx) == 0:
            raise bad(key, f"expected a non-empty 1-D int array, got {idx.dtype} {idx.shape}")
        if idx.min() < 0 or idx.max() >= n:
            raise bad(key, f"indices must be in [0, {n})")
    weights = arrays["layer_weights"]
    if weights.dtype.kind != "f" or weights.shape != (anc.shape[1],):
        raise bad("layer_weights", f"expected ({anc.shape[1]},) floats, got {weights.shape}")
    if arrays["settings"].dtype.kind != "U" or arrays["settings"].ndim != 0:
        raise bad("settings", "expected one JSON string")


# -- training from a bundle ---------------------------------------------------------------------


def plan_fits(
    settings: dict[str, Any],
    methods: list[str] | None = None,
    bits: list[int] | None = None,
    seeds: list[int] | None = None,
    *,
    work_dir: str | Path,
) -> list[Fit]:
    """Every deep fit asked for (shdh.plan.all_methods): the settings' train section, or the given
    subsets of it (e.g. SHDH at 64 bits first, when device time is short), each with its work folder
    (its checkpoint) under work_dir as the plan lays model folders out."""
    section = settings["train"]
    methods = methods or list(section["methods"])
    shallow = [m for m in methods if not method(m).deep]
    if shallow:
        raise ConfigError(
            f"bundle: {shallow} are shallow methods; they fit GIST features where the pipeline "
            "runs (shdh baselines), not from a bundle"
        )
    return section_fits(
        section,
        methods,
        list(bits or section["bits"]),
        seed=int(settings.get("seed", 0)),
        models_root=work_dir,
        seeds=seeds,
    )


def train_bundle(
    bundle: Bundle,
    out_dir: str | Path,
    *,
    methods: list[str] | None = None,
    bits: list[int] | None = None,
    seeds: list[int] | None = None,
    overrides: Sequence[str] = (),
    work_dir: str | Path | None = None,
    progress: bool = False,
) -> list[Path]:
    """Train the fits plan_fits picks from the bundle, its train settings changed by the
    `KEY=VALUE` overrides (shdh.plan.overrides: train.epochs=2, train.shdh.alpha=0.5); write
    out_dir/codes/NAME.npz, out_dir/fits/NAME.json and out_dir/bundle.json. A fit whose codes and
    record exist for the same bundle and settings is kept; an interrupted one resumes from its
    checkpoint in work_dir (out_dir + "-work")."""
    out_dir = Path(out_dir)
    work_dir = Path(work_dir) if work_dir else out_dir.with_name(out_dir.name + "-work")
    train = {"train": bundle.settings["train"]}
    section = apply_overrides(train, overrides, "the bundle's settings")["train"]
    try:  # the planner's errors speak of params.yaml; here they are the bundle's settings
        planned = {**bundle.settings, "train": section}
        fits = plan_fits(planned, methods, bits, seeds, work_dir=work_dir)
    except ConfigError as err:
        given = " ".join(f"--set {text}" for text in overrides)
        where = f"the bundle's train settings with {given}" if overrides else "bundle"
        raise ConfigError(f"{where}: {str(err).removeprefix('params.yaml: ')}") from err
    device = resolve_device(str(section.get("device", "auto")))  # before any work
    manifest = {
        "bundle_sha256": bundle.sha256,
        "dataset": bundle.settings.get("dataset"),
        "profile": bundle.settings.get("profile"),
        "train": section,
        "device": device_line(device),
        "torch": torch.__version__,
        "host": platform.node(),
    }
    atomic_write_text(out_dir / MANIFEST, json.dumps(manifest, indent=2) + "\n")
    split = Split(bundle.query_idx, bundle.db_idx, 0, 0.0)
    return [_train_fit(bundle, fit, split, out_dir, manifest, progress) for fit in fits]


def _train_fit(
    bundle: Bundle, fit: Fit, split: Split, out_dir: Path, manifest: dict, progress: bool
) -> Path:
    """One fit from the bundle, by the fit runner; its codes and record, unless they are there
    for the same bundle and settings already."""
    codes_path = out_dir / CODES_DIR / f"{fit.name}.npz"
    record_path = out_dir / FITS_DIR / f"{fit.name}.json"
    base = json.loads(json.dumps(record_base(bundle, fit)))
    if codes_path.is_file() and _same_fit(record_path, base):
        log.info("%s: already trained from this bundle with these settings", fit.name)
        return codes_path
    cls = hasher_class(fit.method)
    b = bundle
    train_idx, pairs = training_items(cls, split, b.ancestors, b.layer_weights, fit.n_train)
    training = Training(resume="auto", progress=progress)
    fitted = run_fit(fit, cls, b.images[train_idx], pairs, training=training)
    start = time.perf_counter()
    q, db = fitted.hasher.encode(b.images[b.query_idx]), fitted.hasher.encode(b.images[b.db_idx])
    encode_seconds = time.perf_counter() - start
    save_codes(codes_path, _codes(bundle, fitted.hasher, q, db))
    record = {
        **base,
        "own_seed": fit.own_seed,
        "checkpoint_from": fitted.checkpoint_from,
        "fit_seconds": round(fitted.seconds, 3),
        "encode_seconds": round(encode_seconds, 3),
        "n_train_items": fitted.n_train,
        **fitted.hasher.network_record(),  # the backbone and its starting weights' SHA-256
        "device": manifest["device"],
        "torch": manifest["torch"],
        **instruction_set.describe(),
        "history": fitted.hasher.history_,
    }
    atomic_write_text(record_path, json.dumps(record, indent=2) + "\n")
    log.info("%s: codes in %s", fit.name, codes_path)
    return codes_path


def record_base(bundle: Bundle, fit: Fit) -> dict[str, Any]:
    """What decides a fit's codes: a record with these values belongs to this fit. Where and
    how fast it ran (device, threads, compilation) does not. The method's settings stand by
    their own names (alpha, eta), the loop's as one group."""
    params = flat_params(fit.params)
    params["loop"] = {k: v for k, v in params["loop"].items() if k not in RUNTIME_FIELDS}
    return {
        "method": fit.method,
        "bits": fit.bits,
        "seed": fit.seed,
        "params": params,
        "bundle_sha256": bundle.sha256,
        "code": source_fingerprint.fingerprint([hasher_class(fit.method).__module__]),
    }


def _codes(bundle: Bundle, hasher: Any, q: np.ndarray, db: np.ndarray) -> Codes:
    """The codes file of a fit: its packed codes with the split's items."""
    b = bundle
    return Codes(
        query_codes=pack_codes(q),
        db_codes=pack_codes(db),
        n_bits=hasher.n_bits,
        segment_sizes=np.asarray(hasher.segment_sizes(), dtype=np.int64),
        segment_weights=np.asarray(hasher.segment_weights(), dtype=np.float64),
        query_ancestors=b.ancestors[b.query_idx],
        db_ancestors=b.ancestors[b.db_idx],
        query_ids=b.ids[b.query_idx],
        db_ids=b.ids[b.db_idx],
    )


def _same_fit(record_path: Path, base: dict[str, Any]) -> bool:
    try:
        record = json.loads(record_path.read_text())
    except (OSError, json.JSONDecodeError):
        return False
    return all(record.get(key) == value for key, value in base.items())


def device_line(device: torch.device) -> str:
    """The card the fits ran on, as the results record it: its name and memory, or the CPU."""
    if device.type != "cuda":
        return f"cpu ({platform.processor() or platform.machine()})"
    props = torch.cuda.get_device_properties(device)
    return (
        f"{props.name}, {props.total_memory / 2**30:.0f} GiB, CUDA {torch.version.cuda}, "
        f"torch {torch.__version__}"
    )


# -- the command line of the GPU side ---------------------------------------------------------


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bundle", help="the bundle file (shdh bundle export)")
    parser.add_argument("--out", required=True, help="output folder: codes/, fits/, bundle.json")
    parser.add_argument("--work-dir", help="checkpoints (default: OUT-work, beside --out)")
    parser.add_argument("--methods", nargs="+", help="deep methods (default: train.methods)")
    parser.add_argument(
        "--bits", nargs="+", type=whole_number(1), help="code lengths (default: train.bits)"
    )
    parser.add_argument("--seeds", nargs="+", type=int, help="own seeds (default: train.seeds)")
    parser.add_argument("--epochs", type=whole_number(1), help="override train.epochs")
    parser.add_argument("--device", help="override train.device (auto, cpu, cuda)")
    parser.add_argument("--compile", action="store_true", help="train with torch.compile")
    parser.add_argument("--no-cuda-graph", action="store_true", help="eager steps, no CUDA graph")
    parser.add_argument("--no-fused-sgd", action="store_true", help="torch's default SGD kernels")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a train setting by its params.yaml key (repeatable): "
        "train.backbone=resnet18, train.shdh.alpha=0.5, train.bits=[16] (shdh.plan.overrides)",
    )


def run_train(args: argparse.Namespace) -> int:
    for option, folder in (("--out", args.out), ("--work-dir", args.work_dir)):
        if folder and Path(folder).exists() and not Path(folder).is_dir():
            raise ConfigError(f"{option} {folder}: a file; the codes and records go in a folder")
    bundle = read_bundle(args.bundle)
    flags = {
        "epochs": args.epochs,
        "device": args.device,
        "compile": "true" if args.compile else None,
        "cuda_graph": "false" if args.no_cuda_graph else None,
        "fused_sgd": "false" if args.no_fused_sgd else None,
    }
    overrides = [*args.set, *(f"train.{k}={v}" for k, v in flags.items() if v)]
    for path in train_bundle(
        bundle,
        args.out,
        methods=args.methods,
        bits=args.bits,
        seeds=args.seeds,
        overrides=overrides,
        work_dir=args.work_dir,
        progress=not args.no_progress,
    ):
        print(f"codes written to {path}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """`python -m shdh.bundle train ...`: the GPU side, importing only the core."""
    parser = argparse.ArgumentParser(
        prog="python -m shdh.bundle", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="action", required=True)
    add_train_arguments(sub.add_parser("train", help="train the deep methods of a bundle"))
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    try:
        return run_train(args)
    except (ValueError, OSError) as err:
        log.error("%s", err)
        return 1


if __name__ == "__main__":
    # numpy and torch loaded with this module: a pin set now restarts the process pinned
    instruction_set.pin_cpu(reexec=True)
    raise SystemExit(main())
