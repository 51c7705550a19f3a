"""The typed schema of params.yaml: one frozen dataclass per section, one field per key.

Each field carries what it accepts and what it means (shdh.settings.checks.setting); the
defaults are the ones the code applies when a key is left out, and keys without a default must be
in every params file. params.yaml's own comments say the same at more length.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from shdh.core.loss_settings import (
    E1_MODES,
    E2_MODES,
    REDUCTIONS,
    TARGETS,
    DPSHLossSettings,
    SHDHLossSettings,
)
from shdh.data.dataset_catalogue import DATASET_NAMES
from shdh.hashers import method_catalogue
from shdh.nets import BACKBONES, HEAD_INITS
from shdh.settings.checks import (
    BOOL,
    DEVICE,
    SHA256,
    TEXT,
    Check,
    choice,
    integer,
    list_of,
    number,
    optional,
    section_of,
    setting,
    with_checks,
)
from shdh.training import loop_settings

DATASETS = DATASET_NAMES
# Which methods train on images (train.methods) and which on GIST features (baselines.methods),
# from their declarations (torch-free: validating the settings does not import torch).
DEEP_METHODS = method_catalogue.names("deep")
SHALLOW_METHODS = method_catalogue.names("shallow")
# SHDH's code layouts (shdh.core.level_weights.LAYOUTS, whose module loads numpy;
# tests/unit/test_settings.py keeps them equal).
LAYOUTS = ("levels", "paper")


NAME = Check(
    "a name without '/' or '|'",
    "names without '/' or '|'",
    lambda v: isinstance(v, str) and bool(v.strip()) and "/" not in v and "|" not in v,
)
SEEDS = list_of(integer(0), min_len=1, distinct=True, nullable=True)
BITS = list_of(integer(1), min_len=1, distinct=True)


@dataclass(frozen=True, kw_only=True)
class TableSettings:
    image_column: str = setting(TEXT, "the column with each image's path", "image")
    label_column: str = setting(TEXT, 'the column with the "/"-separated label path', "label")


@dataclass(frozen=True, kw_only=True)
class DataSettings:
    dataset: str = setting(choice(*DATASETS), "which data set: a built-in one, or folder/table")
    raw_dir: str = setting(TEXT, "the raw files; a folder tree or a CSV/Parquet file of your own")
    sources: list = setting(list_of(TEXT), "where `shdh fetch` looks, in order")
    verify: bool = setting(BOOL, "md5 checks of downloads", True)
    download_fallback: bool = setting(
        BOOL, "a pipeline step whose dvc pull fails downloads from sources instead", False
    )
    skip_bad_images: bool = setting(BOOL, "leave out undecodable images instead of failing", False)
    image_size: int = setting(integer(1), "folder/table: the side images are resized to", 32)
    color: bool = setting(BOOL, "folder/table: RGB images; false: grayscale", True)
    inner_labels: bool = setting(BOOL, "folder/table: allow items labelled at an inner node", False)
    name: str | None = setting(
        optional(NAME), "folder/table: the dataset's and tree root's name (null: file name)", None
    )
    workers: int | None = setting(
        optional(integer(0)), "folder/table: decoding processes (null: one per core)", None
    )
    shard_mb: float | None = setting(
        optional(number(0, open_low=True)),
        "images as shards of about this many MiB (null: one images.npy)",
        None,
    )
    table: TableSettings = setting(
        section_of(TableSettings), "table: the image and label columns", TableSettings()
    )
    prepared_dir: str = setting(TEXT, "the converted dataset and its split")
    query_fraction: float = setting(
        number(0, 1, open_low=True, open_high=True), "share of the items used as queries"
    )
    max_items: int | None = setting(optional(integer(1)), "a seeded subset of this many items")


@dataclass(frozen=True, kw_only=True)
class TreeSettings:
    source: str = setting(TEXT, "dataset, builtin:NAME or a tree JSON file")
    out_dir: str = setting(TEXT, "tree.json and the ancestor matrix")


@dataclass(frozen=True, kw_only=True)
class SMatrixSettings:
    out: str = setting(TEXT, "the S-matrix artifact")
    sample_size: int = setting(integer(0), "items of the dense sample block")


@dataclass(frozen=True, kw_only=True)
class FeaturesSettings:
    out: str = setting(TEXT, "the GIST features file")
    batch_size: int = setting(integer(1), "images per GIST batch")


# The deep loop's settings: shdh.training.loop_settings.LoopSettings, its fields and defaults, with
# a check and a meaning for each; plus the loss's `reduction`, which every objective takes
# (shdh.core.losses).
LoopSettings = with_checks(
    loop_settings.LoopSettings,
    "The deep methods' shared backbone and loop "
    "(shdh.training.loop_settings.LoopSettings, checked).",
    {
        "backbone": (choice(*BACKBONES), "the network under the hashing head"),
        "pretrained": (TEXT, "none, a weights file, s3://, https:// or a torchvision name"),
        "pretrained_sha256": (optional(SHA256), "the weights file's SHA-256"),
        "backbone_lr": (number(0), "the backbone's lr as a multiple of lr"),
        "freeze_bn": (BOOL, "keep the backbone's batch-norm statistics"),
        "augment": (BOOL, "random resized crops and flips in training"),
        "width": (number(0, open_low=True), "CNN-F width multiplier"),
        "image_size": (integer(8), "network input side"),
        "epochs": (integer(1), "passes over the training set"),
        "batch_size": (integer(2), "minibatch size"),
        "lr": (number(0, open_low=True), "learning rate"),
        "momentum": (number(0, 1, open_high=True), "SGD momentum"),
        "weight_decay": (number(0), "L2 weight decay"),
        "lr_decay": (number(0, 1, open_low=True), "lr factor per decay step"),
        "lr_decay_every": (integer(1), "epochs between lr decays"),
        "grad_clip": (number(0), "gradient-norm clipping; 0 turns it off"),
        "head_init": (choice(*HEAD_INITS), "hashing head initialisation"),
        "device": (DEVICE, "auto, cpu or cuda[:N]"),
        "bf16": (BOOL, "bf16 autocast on CUDA"),
        "num_threads": (optional(integer(1)), "torch CPU threads"),
        "loader_workers": (integer(0), "processes that gather batches ahead; 0: in the loop"),
        "compile": (BOOL, "torch.compile the network for training (GPU)"),
        "cuda_graph": (BOOL, "replay each training step as a CUDA graph (GPU)"),
        "fused_sgd": (BOOL, "SGD as one fused kernel (GPU)"),
        "checkpoint_seconds": (number(0), "seconds between checkpoints; 0: every epoch"),
        "val_size": (integer(0), "training items held out to score every epoch"),
        "schedule": (choice(*loop_settings.SCHEDULES), "step (fixed decay) or plateau"),
        "patience": (integer(0), "plateau: epochs without gain before a decay"),
        "min_delta": (number(0), "plateau: validation NDCG@100 gain that counts"),
        "max_decays": (integer(0), "plateau: decays before the fit stops"),
    },
    [
        (
            "reduction",
            str,
            setting(choice(*REDUCTIONS), "sum over partners or mean over pairs", "sum"),
        )
    ],
)

# Each method's own settings: the fields of its declared `params` (shdh.hashers.method_catalogue),
# with their defaults, and the check and meaning of each.
PARAM_CHECKS: dict[type, dict[str, tuple[Check, str]]] = {
    method_catalogue.ITQParams: {"n_iter": (integer(0), "rotation iterations")},
    method_catalogue.KMHParams: {
        "bits_per_subspace": (integer(1), "bits of each k-means subspace"),
        "lam": (number(0), "affinity-error weight"),
        "n_iter": (integer(0), "k-means iterations"),
    },
    method_catalogue.KSHParams: {
        "n_anchors": (integer(1), "kernel anchors"),
        "n_labelled": (integer(1), "labelled items whose pair labels are fitted"),
        "n_iter": (integer(0), "gradient steps per bit"),
        "tol": (number(0), "early-stop tolerance"),
    },
    method_catalogue.LFHParams: {
        "n_iter": (integer(0), "stochastic iterations"),
        "beta": (number(0, open_low=True), "prior variance"),
        "lam": (number(0), "ridge of the out-of-sample regression"),
        "n_sampled": (optional(integer(1)), "columns of S per iteration"),
    },
    method_catalogue.COSDISHParams: {
        "n_outer": (integer(1), "outer stochastic iterations"),
        "n_alternations": (integer(1), "alternations per iteration"),
        "n_sampled": (optional(integer(1)), "sampled columns"),
        "ridge": (number(0), "out-of-sample regulariser"),
        "balance": (BOOL, "weigh dissimilar pairs as much as similar ones"),
    },
    method_catalogue.SHDHParams: {
        "layout": (choice(*LAYOUTS), "levels (K-1 segments) or paper (K)"),
        "memory_bank": (BOOL, "also pair the batch with past outputs"),
    },
    method_catalogue.DPSHParams: {"memory_bank": (BOOL, "the original's bank of all outputs")},
    method_catalogue.NoParams: {},
}
# A deep method's loss settings, by its declared objective (shdh.hashers.method_catalogue; their
# defaults are its fields'): the check and meaning of each but `reduction`, which every deep method
# shares.
OBJECTIVE_CHECKS: dict[type, dict[str, tuple[Check, str]]] = {
    SHDHLossSettings: {
        "alpha": (number(0), "weight of E2"),
        "e1": (choice(*E1_MODES), "per-level fit or the matrix form"),
        "e2": (choice(*E2_MODES), "balance, trace or none"),
        "target": (choice(*TARGETS), "rho target when s^k = 0"),
    },
    DPSHLossSettings: {"eta": (number(0), "weight of the quantisation term")},
}


def _objective_fields(method: method_catalogue.Method) -> list[tuple[str, Any, Any]]:
    """A deep method's loss settings as fields of its section, with their declared defaults."""
    if method.objective is None:
        return []
    checks = OBJECTIVE_CHECKS.get(method.objective, {})
    own = [f for f in dataclasses.fields(method.objective) if f.name != "reduction"]
    missing = sorted({f.name for f in own} - set(checks))
    if missing:
        raise TypeError(
            f"method '{method.name}': no check for {missing} of {method.objective.__name__} in "
            "shdh.settings.sections.OBJECTIVE_CHECKS"
        )
    return [(f.name, f.type, setting(*checks[f.name], f.default)) for f in own]


def _loop_overrides() -> list[tuple[str, Any, Any]]:
    """Every loop setting, as a deep method's own: it overrides train's value for this method
    (left out: train's value; the typed object then holds None)."""
    return [
        (
            f.name,
            Any,
            setting(f.metadata["check"], f"{f.metadata['doc']}, for this method only", None),
        )
        for f in dataclasses.fields(LoopSettings)
    ]


def method_section(method: method_catalogue.Method) -> type:
    """A method's section of params.yaml (train.shdh, baselines.ksh+h): its params, checked; a
    deep method's also its loss settings and every loop setting."""
    name = f"{method.params.__name__.removesuffix('Params')}Settings"
    doc = (
        f"{method.title}'s own settings ({'train' if method.deep else 'baselines'}.{method.name})."
    )
    if method.params not in PARAM_CHECKS:
        raise TypeError(
            f"method '{method.name}': its params class {method.params.__name__} has no entry in "
            "shdh.settings.sections.PARAM_CHECKS (a check and a meaning for each of its fields)"
        )
    extra = _objective_fields(method) + _loop_overrides() if method.deep else []
    return with_checks(method.params, doc, PARAM_CHECKS[method.params], extra, name=name)


def _method_fields(kind: str) -> list[tuple[str, Any, Any]]:
    """One nullable sub-section per method of a kind, under its name (ksh+h as ksh_h)."""
    found = []
    for method in method_catalogue.METHODS:
        if method.kind == kind:
            check = section_of(method_section(method), nullable=True)
            key = method.name if not method.name.isidentifier() else None
            field = setting(check, f"{method.title}'s settings", None, key=key)
            found.append((method.name.replace("+", "_"), Any, field))
    return found


def _with_methods(cls: type, kind: str) -> type:
    """A section class plus a sub-section for every declared method of a kind."""
    made = dataclasses.make_dataclass(
        cls.__name__.lstrip("_"), _method_fields(kind), bases=(cls,), frozen=True, kw_only=True
    )
    made.__doc__ = cls.__doc__
    return made


@dataclass(frozen=True, kw_only=True)
class _TrainSettings(LoopSettings):
    """The deep methods (train): the loop's settings, which fits, and each method's own."""

    methods: list = setting(list_of(choice(*DEEP_METHODS), distinct=True), "deep methods to fit")
    bits: list = setting(BITS, "code lengths")
    models_dir: str = setting(TEXT, "METHOD/METHOD-BITS folders of the deep methods")
    seeds: list | None = setting(SEEDS, "null: one fit with `seed`; a list: one fit per seed", None)
    n_train: int | None = setting(optional(integer(2)), "training subset (null: all)", None)
    nodes: int = setting(integer(1), "nodes of a fit's Kubeflow TrainJob (1: the plain step)", 1)
    processes_per_node: int = setting(
        integer(1), "training processes (GPUs) on each node of a fit's TrainJob", 1
    )


@dataclass(frozen=True, kw_only=True)
class _BaselinesSettings:
    """The shallow methods (baselines): which fits, and each method's own settings."""

    models_dir: str = setting(TEXT, "METHOD/METHOD-BITS folders of the shallow methods")
    methods: list = setting(
        list_of(choice(*SHALLOW_METHODS), distinct=True), "shallow methods to fit", ()
    )
    bits: list = setting(list_of(integer(1), distinct=True), "code lengths", ())
    seeds: list | None = setting(SEEDS, "as train.seeds", None)
    n_train: int | None = setting(optional(integer(2)), "training subset (null: all)", None)


TrainSettings = _with_methods(_TrainSettings, "deep")
BaselinesSettings = _with_methods(_BaselinesSettings, "shallow")


@dataclass(frozen=True, kw_only=True)
class EvaluateSettings:
    n: int = setting(integer(1), "the @n of ACG, DCG, NDCG")
    wr_ns: list = setting(list_of(integer(1)), "weighted-recall cut-offs", (100, 1000, 5000))
    curve_max: int = setting(integer(1), "WR@n curve up to this n", 5000)
    radius_queries: int | None = setting(
        optional(integer(1)), "queries of the WR-by-radius curve (null: all)", None
    )
    workers: int | None = setting(
        optional(integer(1)), "ranking threads (null: one per core)", None
    )
    random_floor: bool = setting(BOOL, "also score seeded random codes", True)
    results_dir: str = setting(TEXT, "metrics, codes, tables and plots of this run")
    report: str | None = setting(optional(TEXT), "the Markdown report of this run", None)
    alpha_sweep: str | None = setting(
        optional(TEXT), "Fig. 5's sweep file, drawn if it exists", None
    )


@dataclass(frozen=True, kw_only=True)
class IndexSettings:
    out_dir: str = setting(
        TEXT, "the search index that `shdh serve` answers from", "artifacts/index"
    )
    model_name: str = setting(
        TEXT, "the registered encoder it encodes with (the register stage's --name)", "shdh-encoder"
    )
    alias: str = setting(TEXT, "the alias naming its version (the register stage's)", "champion")
    engine: str = setting(
        choice("memory", "milvus"),
        "memory: the in-process index's files in out_dir; milvus: a Milvus collection",
        "memory",
    )
    milvus_uri: str = setting(
        TEXT,
        "with engine milvus: a Milvus Lite file, or a server's http(s)://HOST:PORT (its token "
        "from $SHDH_MILVUS_TOKEN)",
        "artifacts/milvus/index.db",
    )
    milvus_collection: str | None = setting(
        optional(TEXT), "the collection (null: named for the encoder's model, version, run)", None
    )
    milvus_index: str = setting(
        choice("BIN_FLAT", "BIN_IVF_FLAT"),
        "BIN_FLAT: exact; BIN_IVF_FLAT: inverted lists, approximate (a server only)",
        "BIN_FLAT",
    )
    milvus_nlist: int = setting(integer(1), "BIN_IVF_FLAT's number of lists", 1024)


PROFILE = Check(
    "a profile name (letters, digits, '.', '_', '-')",
    "profile names",
    lambda v: isinstance(v, str) and bool(v) and all(c.isalnum() or c in "._-" for c in v),
)


@dataclass(frozen=True, kw_only=True)
class ParamsSettings:
    """The whole file: what `shdh.settings.validate` checks before any step does work."""

    profile: str | None = setting(optional(PROFILE), "which profile the values came from", None)
    seed: int = setting(integer(0), "master seed of the split, samples, init and shuffles")
    data: DataSettings = setting(section_of(DataSettings), "the data set and its split")
    tree: TreeSettings = setting(section_of(TreeSettings), "the label tree")
    smatrix: SMatrixSettings = setting(section_of(SMatrixSettings), "the similarity artifact")
    features: FeaturesSettings = setting(section_of(FeaturesSettings), "GIST features")
    train: TrainSettings = setting(section_of(TrainSettings), "the deep methods")
    baselines: BaselinesSettings = setting(section_of(BaselinesSettings), "the shallow methods")
    evaluate: EvaluateSettings = setting(section_of(EvaluateSettings), "scoring and reports")
    index: IndexSettings = setting(
        section_of(IndexSettings), "the search index of the database", IndexSettings()
    )


# The sections that are pipeline parameters (shdh.kubeflow). Not the index section: the DAG's
# index task encodes with the version its register task has just registered.
SECTIONS: dict[str, type] = {
    "data": DataSettings,
    "tree": TreeSettings,
    "smatrix": SMatrixSettings,
    "features": FeaturesSettings,
    "train": TrainSettings,
    "baselines": BaselinesSettings,
    "evaluate": EvaluateSettings,
}
