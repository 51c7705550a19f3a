"""The typed schema of params.yaml: one frozen dataclass per section, one field per key.

Each field carries what it accepts and what it means (shdh.settings.checks.setting); the
defaults are the ones the code applies when a key is left out, and keys without a default must be
in every params file. params.yaml's own comments say the same at more length.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from shdh.loop import HEAD_INITS, SCHEDULES
from shdh.settings.checks import (
    BOOL,
    TEXT,
    Check,
    choice,
    integer,
    list_of,
    number,
    optional,
    section_of,
    setting,
)

DATASETS = ("fashion-mnist-h", "cifar100", "iaprtc12", "folder", "table")
# Which methods train on images (train.methods) and which on GIST features (baselines.methods);
# spelled out here so that validating the settings does not import torch.
DEEP_METHODS = ("shdh", "dpsh", "oracle")
SHALLOW_METHODS = ("itq", "kmh", "ksh", "ksh+h", "lfh", "cosdish", "cosdish+h")
# The deep loop's choices (shdh.losses, shdh.nets.hashing), for the same reason.
LAYOUTS = ("levels", "paper")
E1_MODES = ("levels", "matrix")
E2_MODES = ("balance", "trace", "none")
TARGETS = ("signed", "binary")
REDUCTIONS = ("sum", "mean")

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


@dataclass(frozen=True, kw_only=True)
class LoopSettings:
    """The deep methods' shared backbone and loop (TrainConfig's ranges)."""

    width: float = setting(number(0, open_low=True), "CNN-F width multiplier", 1.0)
    image_size: int = setting(integer(8), "network input side", 32)
    epochs: int = setting(integer(1), "passes over the training set", 10)
    batch_size: int = setting(integer(2), "minibatch size", 128)
    lr: float = setting(number(0, open_low=True), "learning rate", 0.01)
    momentum: float = setting(number(0, 1, open_high=True), "SGD momentum", 0.9)
    weight_decay: float = setting(number(0), "L2 weight decay", 5e-4)
    lr_decay: float = setting(number(0, 1, open_low=True), "lr factor per decay step", 2 / 3)
    lr_decay_every: int = setting(integer(1), "epochs between lr decays", 20)
    reduction: str = setting(choice(*REDUCTIONS), "sum over partners or mean over pairs", "sum")
    grad_clip: float = setting(number(0), "gradient-norm clipping; 0 turns it off", 10.0)
    head_init: str = setting(choice(*HEAD_INITS), "hashing head initialisation", "default")
    device: str = setting(TEXT, "auto, cpu or cuda[:N]", "auto")
    bf16: bool = setting(BOOL, "bf16 autocast on CUDA", True)
    num_threads: int | None = setting(optional(integer(1)), "torch CPU threads", None)
    compile: bool = setting(BOOL, "torch.compile the network for training (GPU)", False)
    cuda_graph: bool = setting(BOOL, "replay each training step as a CUDA graph (GPU)", False)
    checkpoint_seconds: float = setting(number(0), "seconds between checkpoints; 0: every epoch", 0)
    val_size: int = setting(integer(0), "training items held out to score every epoch", 0)
    schedule: str = setting(choice(*SCHEDULES), "step (fixed decay) or plateau", "step")
    patience: int = setting(integer(0), "plateau: epochs without gain before a decay", 2)
    min_delta: float = setting(number(0), "plateau: validation NDCG@100 gain that counts", 0.001)
    max_decays: int = setting(integer(0), "plateau: decays before the fit stops", 2)


def _overrides(name: str, own: list[tuple[str, Any, Any]], doc: str) -> type:
    """A deep method's section: its own fields, plus every loop setting, which overrides train's
    value for this method (left out: train's value; the typed object then holds None)."""
    inherited = []
    for f in dataclasses.fields(LoopSettings):
        meaning = f"{f.metadata['doc']}, for this method only"
        inherited.append((f.name, Any, setting(f.metadata["check"], meaning, None)))
    cls = dataclasses.make_dataclass(name, own + inherited, frozen=True, kw_only=True)
    cls.__doc__ = doc
    return cls


SHDHSettings = _overrides(
    "SHDHSettings",
    [
        ("layout", str, setting(choice(*LAYOUTS), "levels (K-1 segments) or paper (K)", "levels")),
        ("alpha", float, setting(number(0), "weight of E2", 1.0)),
        ("e1", str, setting(choice(*E1_MODES), "per-level fit or the matrix form", "levels")),
        ("e2", str, setting(choice(*E2_MODES), "balance, trace or none", "balance")),
        ("target", str, setting(choice(*TARGETS), "rho target when s^k = 0", "signed")),
        ("memory_bank", bool, setting(BOOL, "also pair the batch with past outputs", False)),
    ],
    "SHDH's own settings (train.shdh).",
)
DPSHSettings = _overrides(
    "DPSHSettings",
    [
        ("eta", float, setting(number(0), "weight of the quantisation term", 10.0)),
        ("memory_bank", bool, setting(BOOL, "the original's bank of all outputs", False)),
    ],
    "DPSH's own settings (train.dpsh).",
)
OracleSettings = _overrides("OracleSettings", [], "The classifier oracle's settings.")


@dataclass(frozen=True, kw_only=True)
class TrainSettings(LoopSettings):
    methods: list = setting(list_of(choice(*DEEP_METHODS), distinct=True), "deep methods to fit")
    bits: list = setting(BITS, "code lengths")
    models_dir: str = setting(TEXT, "one folder per METHOD-BITS")
    seeds: list | None = setting(SEEDS, "null: one fit with `seed`; a list: one fit per seed", None)
    n_train: int | None = setting(optional(integer(1)), "training subset (null: all)", None)
    shdh: Any = setting(section_of(SHDHSettings, nullable=True), "SHDH's own settings", None)
    dpsh: Any = setting(section_of(DPSHSettings, nullable=True), "DPSH's own settings", None)
    oracle: Any = setting(
        section_of(OracleSettings, nullable=True), "the classifier oracle's settings", None
    )


@dataclass(frozen=True, kw_only=True)
class ITQSettings:
    n_iter: int = setting(integer(0), "rotation iterations", 50)


@dataclass(frozen=True, kw_only=True)
class KMHSettings:
    bits_per_subspace: int = setting(integer(1), "bits of each k-means subspace", 4)
    lam: float = setting(number(0), "affinity-error weight", 10.0)
    n_iter: int = setting(integer(0), "k-means iterations", 50)


@dataclass(frozen=True, kw_only=True)
class KSHSettings:
    n_anchors: int = setting(integer(1), "kernel anchors", 300)
    n_labelled: int = setting(integer(1), "labelled items whose pair labels are fitted", 2000)
    n_iter: int = setting(integer(0), "gradient steps per bit", 500)
    tol: float = setting(number(0), "early-stop tolerance", 1e-2)


@dataclass(frozen=True, kw_only=True)
class LFHSettings:
    n_iter: int = setting(integer(0), "stochastic iterations", 50)
    beta: float = setting(number(0, open_low=True), "prior variance", 30.0)
    lam: float = setting(number(0), "ridge of the out-of-sample regression", 1.0)
    n_sampled: int | None = setting(optional(integer(1)), "columns of S per iteration", None)


@dataclass(frozen=True, kw_only=True)
class COSDISHSettings:
    n_outer: int = setting(integer(1), "outer stochastic iterations", 10)
    n_alternations: int = setting(integer(1), "alternations per iteration", 3)
    n_sampled: int | None = setting(optional(integer(1)), "sampled columns", None)
    ridge: float = setting(number(0), "out-of-sample regulariser", 1.0)
    balance: bool = setting(BOOL, "weigh dissimilar pairs as much as similar ones", True)


@dataclass(frozen=True, kw_only=True)
class BaselinesSettings:
    models_dir: str = setting(TEXT, "METHOD/METHOD-BITS folders of the shallow methods")
    methods: list = setting(
        list_of(choice(*SHALLOW_METHODS), distinct=True), "shallow methods to fit", ()
    )
    bits: list = setting(list_of(integer(1), distinct=True), "code lengths", ())
    seeds: list | None = setting(SEEDS, "as train.seeds", None)
    n_train: int | None = setting(optional(integer(1)), "training subset (null: all)", None)
    itq: Any = setting(section_of(ITQSettings, nullable=True), "ITQ's settings", None)
    kmh: Any = setting(section_of(KMHSettings, nullable=True), "KMH's settings", None)
    ksh: Any = setting(section_of(KSHSettings, nullable=True), "KSH's settings", None)
    ksh_h: Any = setting(
        section_of(KSHSettings, nullable=True), "KSH+H's settings", None, key="ksh+h"
    )
    lfh: Any = setting(section_of(LFHSettings, nullable=True), "LFH's settings", None)
    cosdish: Any = setting(section_of(COSDISHSettings, nullable=True), "COSDISH's settings", None)
    cosdish_h: Any = setting(
        section_of(COSDISHSettings, nullable=True), "COSDISH+H's settings", None, key="cosdish+h"
    )


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


SECTIONS: dict[str, type] = {
    "data": DataSettings,
    "tree": TreeSettings,
    "smatrix": SMatrixSettings,
    "features": FeaturesSettings,
    "train": TrainSettings,
    "baselines": BaselinesSettings,
    "evaluate": EvaluateSettings,
}
