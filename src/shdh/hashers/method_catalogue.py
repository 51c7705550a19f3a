"""Every hashing method, declared once: its name, its kind, where its class lives, its settings
and how the tables name it.

Everything else is derived from METHODS: the settings' choices (train.methods, baselines.methods)
and each method's sub-section of params.yaml (shdh.settings.sections, from the checks of its
settings' fields), the lookup of a name's class (shdh.hashers.hasher_class, the CLI's choices),
the code each DVC stage depends on (tests/dvc_code_deps.py reads the modules declared here), the
report's "best deep over best shallow" groups and the tables' and figures' row order and labels.

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
    paper_row: int | None = None  # its row in the paper's Table 1 (None: not in the paper)
    reference: bool = False  # a bound to compare with, not a hashing method: in no claim

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(
                f"method {self.name!r}: kind must be one of {KINDS}, not {self.kind!r}"
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
    Method("itq", "shallow", "shdh.hashers.itq", "ITQ", ms.ITQSettings, "ITQ", 2),
    Method("kmh", "shallow", "shdh.hashers.kmh", "KMH", ms.KMHSettings, "KMH", 1),
    Method("ksh", "shallow", "shdh.hashers.ksh", "KSH", ms.KSHSettings, "KSH", 8),
    Method("ksh+h", "shallow", "shdh.hashers.ksh", "KSHH", ms.KSHSettings, "KSH+H", 4),
    Method("lfh", "shallow", "shdh.hashers.lfh", "LFH", ms.LFHSettings, "LFH", 7),
    Method(
        "cosdish", "shallow", "shdh.hashers.cosdish", "COSDISH", ms.COSDISHSettings, "COSDISH", 6
    ),
    Method(
        "cosdish+h",
        "shallow",
        "shdh.hashers.cosdish",
        "COSDISHH",
        ms.COSDISHSettings,
        "COSDISH+H",
        3,
    ),
    Method("shdh", "deep", "shdh.hashers.shdh", "SHDH", ms.SHDHSettings, "SHDH", 9),
    Method("dpsh", "deep", "shdh.hashers.dpsh", "DPSH", ms.DPSHSettings, "DPSH", 5),
    Method("dsh", "deep", "shdh.hashers.dsh", "DSH", ms.DSHSettings, "DSH"),
    Method("hashnet", "deep", "shdh.hashers.hashnet", "HashNet", ms.HashNetSettings, "HashNet"),
    Method("dch", "deep", "shdh.hashers.dch", "DCH", ms.DCHSettings, "DCH"),
    Method("dtsh", "deep", "shdh.hashers.dtsh", "DTSH", ms.DTSHSettings, "DTSH"),
    Method("dpsh+h", "deep", "shdh.hashers.dpsh", "DPSHH", ms.DPSHSettings, "DPSH+H"),
    Method(
        "hashnet+h", "deep", "shdh.hashers.hashnet", "HashNetH", ms.HashNetSettings, "HashNet+H"
    ),
    Method(
        "oracle",
        "deep",
        "shdh.hashers.oracle",
        "Oracle",
        ms.OracleSettings,
        "classifier oracle (bound)",
        reference=True,
    ),
    Method(
        "greedyhash",
        "deep",
        "shdh.hashers.greedyhash",
        "GreedyHash",
        ms.GreedyHashSettings,
        "GreedyHash",
    ),
    Method("csq", "deep", "shdh.hashers.csq", "CSQ", ms.CSQSettings, "CSQ"),
    Method(
        "orthohash",
        "deep",
        "shdh.hashers.orthohash",
        "OrthoHash",
        ms.OrthoHashSettings,
        "OrthoHash",
    ),
    Method("hpdh", "deep", "shdh.hashers.hpdh", "HPDH", ms.HPDHSettings, "HPDH"),
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


def declared(module: str, class_name: str) -> Method | None:
    """The method whose class this is, if one is declared (shdh.hashers.base names classes so)."""
    for candidate in METHODS:
        if (candidate.module, candidate.class_name) == (module, class_name):
            return candidate
    return None
