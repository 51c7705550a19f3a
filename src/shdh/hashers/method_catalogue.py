"""Every hashing method, declared once: its name, its kind, where its class lives, its settings
and how the tables name it.

Everything else is derived from METHODS: the settings' choices (train.methods, baselines.methods)
and each method's sub-section of params.yaml (shdh.settings.sections, from the checks of its
settings' fields), the lookup of a name's class (shdh.hashers.hasher_class, the CLI's choices),
the code each DVC stage depends on (tests/dvc_code_deps.py reads the modules declared here), the
report's "best deep over best shallow" groups and "+H over plain" claims, and the tables' and
figures' row order, family groups and labels.

Why plain fields, with a method's module only a name: validating params.yaml reads these
declarations in every command, which must neither import PyTorch nor make the data stages depend
on the methods' code. A method's module loads when the method is used.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from shdh.hashers import method_settings as ms

KINDS = ("shallow", "deep")  # fitted on GIST features / trained as a network on images
# The settings section each kind's methods are listed and set in.
SECTIONS = {"shallow": "baselines", "deep": "train"}

# The families the tables and the figures group the methods by, in their display order. With
# twenty methods a table or a legend in one flat list is hard to read; what a method learns from
# (no labels; pairs or triplets of labels; classes or class centres; the whole label tree) and
# whether it is a network say which methods to read side by side. A family's name is its
# heading in the tables and the legends.
UNSUPERVISED = "unsupervised, shallow"
PAIRWISE_SHALLOW = "pairwise, shallow"
HIERARCHICAL_SHALLOW = "hierarchical, shallow"
PAIRWISE_DEEP = "pairwise and triplet, deep"
CENTRES_DEEP = "classes and centres, deep"
HIERARCHICAL_DEEP = "hierarchical, deep"
OTHER = "other"  # a method declared without a family (a user's own, a test's toy)
REFERENCE = "reference"  # bounds to compare with, not hashing methods (the report adds the floor)
FAMILIES = (
    UNSUPERVISED,
    PAIRWISE_SHALLOW,
    HIERARCHICAL_SHALLOW,
    PAIRWISE_DEEP,
    CENTRES_DEEP,
    HIERARCHICAL_DEEP,
    OTHER,
    REFERENCE,
)


@dataclass(frozen=True)
class Method:
    """One method. `settings` is its settings dataclass (shdh.hashers.method_settings): what
    params.yaml may set for it beside a deep method's shared loop settings, with the checks
    and defaults its constructor applies."""

    name: str  # as params.yaml, the CLI, saved models and the results spell it
    kind: str  # one of KINDS
    module: str  # the module holding its class (and a deep method's objective)
    class_name: str
    settings: type
    title: str  # its row label in the tables and its legend in the figures
    # its row in the paper's Table 1 (None: not in the paper); a record: the tables go by family
    paper_row: int | None = None
    reference: bool = False  # a bound to compare with, not a hashing method: in no claim
    # Its group in the tables and the figures (one of FAMILIES): methods that learn from the
    # same supervision, with or without a network, are read side by side.
    family: str = OTHER

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(
                f"method {self.name!r}: kind must be one of {KINDS}, not {self.kind!r}"
            )
        if self.family not in FAMILIES:
            raise ValueError(
                f"method {self.name!r}: family must be one of {FAMILIES}, not {self.family!r}"
            )
        if self.reference and self.family == OTHER:
            object.__setattr__(self, "family", REFERENCE)  # a bound is read with the bounds
        if self.family == REFERENCE and not self.reference:
            raise ValueError(
                f"method {self.name!r}: family {REFERENCE!r} is for bounds (reference=True): "
                "a hashing method there would be left out of every claim"
            )

    @property
    def deep(self) -> bool:
        return self.kind == "deep"

    @property
    def section(self) -> str:
        """The params.yaml section that lists it (train or baselines)."""
        return SECTIONS[self.kind]

    def load_class(self) -> type:
        """The class, imported now: a method's module (and what it needs) loads only when used."""
        return getattr(importlib.import_module(self.module), self.class_name)


# The order is the CLI's and the settings' (their help and their errors list the names so).
METHODS: tuple[Method, ...] = (
    Method(
        "itq", "shallow", "shdh.hashers.itq", "ITQ", ms.ITQSettings, "ITQ", 2, family=UNSUPERVISED
    ),
    Method(
        "kmh", "shallow", "shdh.hashers.kmh", "KMH", ms.KMHSettings, "KMH", 1, family=UNSUPERVISED
    ),
    Method(
        "ksh",
        "shallow",
        "shdh.hashers.ksh",
        "KSH",
        ms.KSHSettings,
        "KSH",
        8,
        family=PAIRWISE_SHALLOW,
    ),
    Method(
        "ksh+h",
        "shallow",
        "shdh.hashers.ksh",
        "KSHH",
        ms.KSHSettings,
        "KSH+H",
        4,
        family=HIERARCHICAL_SHALLOW,
    ),
    Method(
        "lfh",
        "shallow",
        "shdh.hashers.lfh",
        "LFH",
        ms.LFHSettings,
        "LFH",
        7,
        family=PAIRWISE_SHALLOW,
    ),
    Method(
        "cosdish",
        "shallow",
        "shdh.hashers.cosdish",
        "COSDISH",
        ms.COSDISHSettings,
        "COSDISH",
        6,
        family=PAIRWISE_SHALLOW,
    ),
    Method(
        "cosdish+h",
        "shallow",
        "shdh.hashers.cosdish",
        "COSDISHH",
        ms.COSDISHSettings,
        "COSDISH+H",
        3,
        family=HIERARCHICAL_SHALLOW,
    ),
    Method(
        "shdh",
        "deep",
        "shdh.hashers.shdh",
        "SHDH",
        ms.SHDHSettings,
        "SHDH",
        9,
        family=HIERARCHICAL_DEEP,
    ),
    Method(
        "dpsh",
        "deep",
        "shdh.hashers.dpsh",
        "DPSH",
        ms.DPSHSettings,
        "DPSH",
        5,
        family=PAIRWISE_DEEP,
    ),
    Method("dsh", "deep", "shdh.hashers.dsh", "DSH", ms.DSHSettings, "DSH", family=PAIRWISE_DEEP),
    Method(
        "hashnet",
        "deep",
        "shdh.hashers.hashnet",
        "HashNet",
        ms.HashNetSettings,
        "HashNet",
        family=PAIRWISE_DEEP,
    ),
    Method("dch", "deep", "shdh.hashers.dch", "DCH", ms.DCHSettings, "DCH", family=PAIRWISE_DEEP),
    Method(
        "dtsh", "deep", "shdh.hashers.dtsh", "DTSH", ms.DTSHSettings, "DTSH", family=PAIRWISE_DEEP
    ),
    Method(
        "dpsh+h",
        "deep",
        "shdh.hashers.dpsh",
        "DPSHH",
        ms.DPSHSettings,
        "DPSH+H",
        family=HIERARCHICAL_DEEP,
    ),
    Method(
        "hashnet+h",
        "deep",
        "shdh.hashers.hashnet",
        "HashNetH",
        ms.HashNetSettings,
        "HashNet+H",
        family=HIERARCHICAL_DEEP,
    ),
    Method(
        "oracle",
        "deep",
        "shdh.hashers.oracle",
        "Oracle",
        ms.OracleSettings,
        "classifier oracle (bound)",
        reference=True,
        family=REFERENCE,
    ),
    Method(
        "greedyhash",
        "deep",
        "shdh.hashers.greedyhash",
        "GreedyHash",
        ms.GreedyHashSettings,
        "GreedyHash",
        family=CENTRES_DEEP,
    ),
    Method("csq", "deep", "shdh.hashers.csq", "CSQ", ms.CSQSettings, "CSQ", family=CENTRES_DEEP),
    Method(
        "orthohash",
        "deep",
        "shdh.hashers.orthohash",
        "OrthoHash",
        ms.OrthoHashSettings,
        "OrthoHash",
        family=CENTRES_DEEP,
    ),
    Method(
        "hpdh",
        "deep",
        "shdh.hashers.hpdh",
        "HPDH",
        ms.HPDHSettings,
        "HPDH",
        family=HIERARCHICAL_DEEP,
    ),
)
# The method the paper proposes: what `shdh train` trains by default, and whose alpha sweep the
# figures draw.
PAPER_METHOD = "shdh"


def _all(methods: tuple[Method, ...] | None) -> tuple[Method, ...]:
    return METHODS if methods is None else methods  # read now: a test may declare a toy one


def by_name(methods: tuple[Method, ...] | None = None) -> dict[str, Method]:
    return {m.name: m for m in _all(methods)}


def method(name: str, methods: tuple[Method, ...] | None = None) -> Method:
    """The declared method of this name, or a ValueError that lists the known ones."""
    known = by_name(methods)
    if name not in known:
        raise ValueError(f"unknown method '{name}' (known: {', '.join(known)})")
    return known[name]


def names(kind: str, methods: tuple[Method, ...] | None = None) -> tuple[str, ...]:
    """The methods of one kind, in declaration order."""
    return tuple(m.name for m in _all(methods) if m.kind == kind)


def families(methods: tuple[Method, ...] | None = None) -> tuple[str, ...]:
    """The families that hold a declared method, in display order (FAMILIES')."""
    used = {m.family for m in _all(methods)}
    return tuple(f for f in FAMILIES if f in used)


def declared(module: str, class_name: str) -> Method | None:
    """The method whose class this is, if one is declared (shdh.hashers.base names classes so)."""
    for candidate in METHODS:
        if (candidate.module, candidate.class_name) == (module, class_name):
            return candidate
    return None
