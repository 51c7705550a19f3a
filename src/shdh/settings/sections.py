"""The typed schema of params.yaml: one frozen dataclass per section, one field per key.

Each field carries what it accepts and what it means (shdh.settings.checks.setting); the
defaults are the ones the code applies when a key is left out, and keys without a default must be
in every params file. params.yaml's own comments say the same at more length.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from dataclasses import dataclass
from typing import Any

from shdh.data.dataset_catalogue import DATASET_NAMES
from shdh.hashers import method_catalogue
from shdh.hashers.method_catalogue import Method
from shdh.hashers.method_settings import REDUCTION_DOC, REDUCTIONS
from shdh.nets import BACKBONES, HEAD_INITS
from shdh.runtime.value_checks import (
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
)
from shdh.settings.checks import with_checks
from shdh.training import loop_settings

DATASETS = DATASET_NAMES
# Which methods train on images (train.methods) and which on GIST features (baselines.methods),
# from their declarations (torch-free: validating the settings does not import torch).
DEEP_METHODS = method_catalogue.names("deep")  # of the catalogue as declared (schema(): any)
SHALLOW_METHODS = method_catalogue.names("shallow")


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
# a check and a meaning for each; plus the loss's `reduction`, which every deep method's settings
# take (shdh.hashers.method_settings).
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
            setting(choice(*REDUCTIONS), REDUCTION_DOC, "sum"),
        )
    ],
)


def _loop_overrides(own: set[str]) -> list[tuple[str, Any, Any]]:
    """Every loop setting, as a deep method's own: it overrides train's value for this method
    (left out: train's value; the typed object then holds None). Not those the method's own
    settings hold already (reduction)."""
    return [
        (
            f.name,
            Any,
            setting(f.metadata["check"], f"{f.metadata['doc']}, for this method only", None),
        )
        for f in dataclasses.fields(LoopSettings)
        if f.name not in own
    ]


def method_section(method: method_catalogue.Method) -> type:
    """A method's section of params.yaml (train.shdh, baselines.ksh+h): the fields of its
    settings dataclass, each with the check and meaning it declares; a deep method's also every
    loop setting."""
    fields = dataclasses.fields(method.settings)
    unchecked = [f.name for f in fields if "check" not in f.metadata]
    if unchecked:
        raise TypeError(
            f"method '{method.name}': {method.settings.__name__} fields {unchecked} declare no "
            "check (shdh.runtime.value_checks.setting)"
        )
    own = [
        (f.name, f.type, setting(f.metadata["check"], f.metadata["doc"], f.default)) for f in fields
    ]
    extra = _loop_overrides({f.name for f in fields}) if method.deep else []
    made = dataclasses.make_dataclass(
        f"{method.settings.__name__.removesuffix('Settings')}Section",
        own + extra,
        frozen=True,
        kw_only=True,
    )
    made.__doc__ = f"{method.title}'s own settings ({method.section}.{method.name})."
    return made


def _method_fields(kind: str, methods: tuple[Method, ...]) -> list[tuple[str, Any, Any]]:
    """One nullable sub-section per method of a kind, under its name (ksh+h as the field
    ksh_h, read from the key ksh+h)."""
    found = []
    for method in methods:
        if method.kind == kind:
            check = section_of(method_section(method), nullable=True)
            key = method.name if not method.name.isidentifier() else None
            field = setting(check, f"{method.title}'s settings", None, key=key)
            found.append((re.sub(r"\W", "_", method.name), Any, field))
    return found


def _with_methods(cls: type, kind: str, methods: tuple[Method, ...]) -> type:
    """A section class whose `methods` lists declared methods of a kind, plus a sub-section for
    each of them."""
    listed = next(f for f in dataclasses.fields(cls) if f.name == "methods")
    names = [m.name for m in methods if m.kind == kind]
    check = list_of(choice(*names), distinct=True)
    made = dataclasses.make_dataclass(
        cls.__name__.lstrip("_"),
        [("methods", list, setting(check, listed.metadata["doc"], listed.default))]
        + _method_fields(kind, methods),
        bases=(cls,),
        frozen=True,
        kw_only=True,
    )
    made.__doc__ = cls.__doc__
    return made


@dataclass(frozen=True, kw_only=True)
class _TrainSettings(LoopSettings):
    """The deep methods (train): the loop's settings, which fits, and each method's own."""

    methods: list = setting(list_of(TEXT, distinct=True), "deep methods to fit")  # _with_methods
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
    methods: list = setting(list_of(TEXT, distinct=True), "shallow methods to fit", ())
    bits: list = setting(list_of(integer(1), distinct=True), "code lengths", ())
    seeds: list | None = setting(SEEDS, "as train.seeds", None)
    n_train: int | None = setting(optional(integer(2)), "training subset (null: all)", None)


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
class _ParamsSettings:
    """The whole file: what `shdh.settings.validate` checks before any step does work."""

    profile: str | None = setting(optional(PROFILE), "which profile the values came from", None)
    seed: int = setting(integer(0), "master seed of the split, samples, init and shuffles")
    data: DataSettings = setting(section_of(DataSettings), "the data set and its split")
    tree: TreeSettings = setting(section_of(TreeSettings), "the label tree")
    smatrix: SMatrixSettings = setting(section_of(SMatrixSettings), "the similarity artifact")
    features: FeaturesSettings = setting(section_of(FeaturesSettings), "GIST features")
    train: Any = setting(section_of(_TrainSettings), "the deep methods")  # schema() sets them
    baselines: Any = setting(section_of(_BaselinesSettings), "the shallow methods")
    evaluate: EvaluateSettings = setting(section_of(EvaluateSettings), "scoring and reports")
    index: IndexSettings = setting(
        section_of(IndexSettings), "the search index of the database", IndexSettings()
    )


@dataclass(frozen=True)
class Schema:
    """params.yaml's schema for one catalogue of methods: the whole file's class, and the
    sections that are pipeline parameters (shdh.kubeflow; not the index section: the DAG's index
    task encodes with the version its register task has just registered)."""

    params: type
    sections: dict[str, type]


@functools.cache
def schema(methods: tuple[Method, ...]) -> Schema:
    """The schema of these declared methods, made once per catalogue (a test may declare a toy
    method: the schema follows)."""
    train = _with_methods(_TrainSettings, "deep", methods)
    baselines = _with_methods(_BaselinesSettings, "shallow", methods)
    params = dataclasses.make_dataclass(
        "ParamsSettings",
        [
            ("train", train, setting(section_of(train), "the deep methods")),
            ("baselines", baselines, setting(section_of(baselines), "the shallow methods")),
        ],
        bases=(_ParamsSettings,),
        frozen=True,
        kw_only=True,
    )
    params.__doc__ = _ParamsSettings.__doc__
    sections = {
        "data": DataSettings,
        "tree": TreeSettings,
        "smatrix": SMatrixSettings,
        "features": FeaturesSettings,
        "train": train,
        "baselines": baselines,
        "evaluate": EvaluateSettings,
    }
    return Schema(params, sections)


def current() -> Schema:
    """The schema of the catalogue as it is declared now."""
    return schema(method_catalogue.METHODS)


# The schema of the declared methods, by the names readers and the pipeline's parameters use.
ParamsSettings = current().params
SECTIONS: dict[str, type] = current().sections
TrainSettings, BaselinesSettings = SECTIONS["train"], SECTIONS["baselines"]
