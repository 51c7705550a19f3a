"""Every hashing method, declared once: its name, its kind, where its class lives, its
hyper-parameters with their defaults, and how the tables name it.

Everything else is derived from METHODS: the settings' choices (train.methods, baselines.methods)
and each method's sub-section of params.yaml (shdh.settings.sections, which attaches a check to
every field of `params`), the registries that resolve a name to its class (shdh.hashers,
shdh.hashers.shallow, the CLI's choices), the report's "best deep over best shallow" groups and
the tables' and figures' row order and labels. A hasher's constructor takes its defaults from its
`params` class, so no number is written twice.

Why one torch-free module of plain fields, rather than a "module:Class" string per method or a
declaration inside each method's module: validating params.yaml reads these declarations in every
command, and every DVC stage depends on the code its command can import (tests/import_graph.py
counts a "module:Class" string as a lazy import). Here a method's module is only a name, so that
checking the settings neither imports torch nor makes the data stages depend on the methods'
code; the registry of each kind (shdh.hashers for the deep methods, shdh.hashers.shallow for the
shallow ones) resolves the names, and spells its classes' modules for the import graph.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from shdh.core.loss_settings import DPSHLossSettings, SHDHLossSettings

KINDS = ("shallow", "deep")  # fitted on GIST features / trained as a network on images


@dataclass(frozen=True)
class ITQParams:
    n_iter: int = 50  # rotation iterations (Gong & Lazebnik 2011)


@dataclass(frozen=True)
class KMHParams:
    bits_per_subspace: int = 4  # b: 2^b codewords per subspace (He, Wen & Sun 2013)
    lam: float = 10.0  # weight of the affinity error
    n_iter: int = 50  # k-means iterations


@dataclass(frozen=True)
class KSHParams:
    n_anchors: int = 300  # m, kernel anchors sampled from the training items
    n_labelled: int = 2000  # l, labelled items whose l x l pair labels are fitted
    n_iter: int = 500  # most accelerated-gradient steps per bit (the authors' budget)
    tol: float = 1e-2  # stop a bit early once |change of the smooth cost| / l <= tol


@dataclass(frozen=True)
class LFHParams:
    n_iter: int = 50  # stochastic iterations (the paper's and the authors' default)
    beta: float = 30.0  # prior variance, used as beta / n_bits like the authors' code
    lam: float = 1.0  # ridge of the regression from features to U, used as lam * N / d
    n_sampled: int | None = None  # columns of S per iteration; None: n_bits (the authors')


@dataclass(frozen=True)
class COSDISHParams:
    n_outer: int = 10  # T_sto of the paper
    n_alternations: int = 3  # T_alt of the paper
    n_sampled: int | None = None  # |Omega|; None: n_bits, the authors' default (sc = q)
    ridge: float = 1.0  # the out-of-sample regulariser (the authors' code)
    balance: bool = True  # weigh dissimilar pairs as much as similar ones (a "soft constraint")


@dataclass(frozen=True)
class SHDHParams:
    """SHDH's own arguments beside its loop and objective (shdh.training.loop_settings,
    shdh.core.losses)."""

    layout: str = "levels"  # "levels": K-1 segments (the root carries no information); "paper": K
    memory_bank: bool = False  # also pair each batch with past outputs


@dataclass(frozen=True)
class DPSHParams:
    memory_bank: bool = False  # the original's bank of all past outputs (see shdh.hashers.deep)


@dataclass(frozen=True)
class NoParams:
    """A method whose only settings are its loop and objective (the classifier oracle)."""


@dataclass(frozen=True)
class Method:
    """One method. `params` holds the hyper-parameters params.yaml may set beside the shared ones
    (a deep method's loop and objective), with the defaults its constructor applies."""

    name: str  # as params.yaml, the CLI, saved models and the results spell it
    kind: str  # one of KINDS
    module: str  # the module holding its class
    class_name: str
    params: type
    title: str  # its row label in the tables and its legend in the figures
    paper_row: int | None = None  # its row in the paper's Table 1 (None: not in the paper)
    reference: bool = False  # a bound to compare with, not a hashing method: in no claim
    objective: type | None = None  # a deep method's loss settings beside the shared reduction

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(
                f"method {self.name!r}: kind must be one of {KINDS}, not {self.kind!r}"
            )

    @property
    def deep(self) -> bool:
        return self.kind == "deep"

    @property
    def location(self) -> str:
        """ "module:Class", as the registries spell it."""
        return f"{self.module}:{self.class_name}"

    def load_class(self) -> type:
        """The class, imported now: a method's module (and what it needs) loads only when used."""
        return getattr(importlib.import_module(self.module), self.class_name)


# The order is the CLI's and the settings' (their help and their errors list the names so).
METHODS: tuple[Method, ...] = (
    Method("itq", "shallow", "shdh.hashers.itq", "ITQ", ITQParams, "ITQ", 2),
    Method("kmh", "shallow", "shdh.hashers.kmh", "KMH", KMHParams, "KMH", 1),
    Method("ksh", "shallow", "shdh.hashers.ksh", "KSH", KSHParams, "KSH", 8),
    Method("ksh+h", "shallow", "shdh.hashers.ksh", "KSHH", KSHParams, "KSH+H", 4),
    Method("lfh", "shallow", "shdh.hashers.lfh", "LFH", LFHParams, "LFH", 7),
    Method("cosdish", "shallow", "shdh.hashers.cosdish", "COSDISH", COSDISHParams, "COSDISH", 6),
    Method(
        "cosdish+h", "shallow", "shdh.hashers.cosdish", "COSDISHH", COSDISHParams, "COSDISH+H", 3
    ),
    Method(
        "shdh",
        "deep",
        "shdh.hashers.deep",
        "SHDH",
        SHDHParams,
        "SHDH",
        9,
        objective=SHDHLossSettings,
    ),
    Method(
        "dpsh",
        "deep",
        "shdh.hashers.deep",
        "DPSH",
        DPSHParams,
        "DPSH",
        5,
        objective=DPSHLossSettings,
    ),
    Method(
        "oracle",
        "deep",
        "shdh.hashers.oracle",
        "Oracle",
        NoParams,
        "classifier oracle (bound)",
        reference=True,
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


def declared(module: str, class_name: str) -> Method | None:
    """The method whose class this is, if one is declared (shdh.hashers.base names classes so)."""
    for candidate in METHODS:
        if (candidate.module, candidate.class_name) == (module, class_name):
            return candidate
    return None
