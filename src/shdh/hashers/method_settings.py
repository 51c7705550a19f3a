"""Each method's own settings: one frozen dataclass per method, one field per setting, each field
with its check, its meaning and its default (shdh.runtime.value_checks.setting).

These fields are the method's sub-section of params.yaml (`baselines.ksh`, `train.shdh`): the
schema (shdh.settings.sections) reads their checks and meanings from here, the plan hands a
method exactly these values, and a hasher's constructor takes its defaults from them, so no
setting is named or numbered twice. A deep method's settings also go, whole, to its objective
(its loss) as one object, and every checkpoint records them.

Why apart from the methods' own modules: checking params.yaml reads every method's settings in
every command, and the data stages must neither import PyTorch (seconds per command) nor depend
on the methods' code. So this module and the catalogue are plain fields, and a method's module,
with its equations, loads only when the method is used.
"""

from __future__ import annotations

from dataclasses import dataclass

from shdh.runtime.value_checks import BOOL, Checked, choice, integer, number, optional, setting

REDUCTIONS = ("sum", "mean")  # a deep loss summed over each anchor's partners, or the mean
REDUCTION_DOC = "sum over partners (or items), or the paper's mean over pairs (or items)"
# SHDH's code layouts (shdh.core.level_weights.LAYOUTS, whose module loads numpy;
# tests/unit/test_settings.py keeps them equal).
LAYOUTS = ("levels", "paper")
E1_MODES = ("levels", "matrix")
E2_MODES = ("balance", "trace", "none")
TARGETS = ("signed", "binary")


def reduction(default: str = "sum"):
    """The `reduction` every deep method takes, train.reduction being shared by all of them."""
    return setting(choice(*REDUCTIONS), REDUCTION_DOC, default)


# --------------------------------------------------------------------------- shallow methods


@dataclass(frozen=True)
class ITQSettings(Checked):
    """ITQ (Gong & Lazebnik 2011)."""

    n_iter: int = setting(integer(0), "rotation iterations", 50)


@dataclass(frozen=True)
class KMHSettings(Checked):
    """KMH (He, Wen & Sun 2013)."""

    bits_per_subspace: int = setting(integer(1), "b: 2^b codewords per k-means subspace", 4)
    lam: float = setting(number(0), "weight of the affinity error", 10.0)
    n_iter: int = setting(integer(0), "k-means iterations", 50)


@dataclass(frozen=True)
class KSHSettings(Checked):
    """KSH and KSH+H (Liu et al. 2012)."""

    n_anchors: int = setting(integer(1), "m, kernel anchors sampled from the training items", 300)
    n_labelled: int = setting(integer(1), "l, labelled items whose pair labels are fitted", 2000)
    n_iter: int = setting(integer(0), "most accelerated-gradient steps per bit", 500)
    tol: float = setting(number(0), "stop a bit once |change of the cost| / l <= tol", 1e-2)


@dataclass(frozen=True)
class LFHSettings(Checked):
    """LFH (Zhang et al. 2014)."""

    n_iter: int = setting(integer(0), "stochastic iterations", 50)
    beta: float = setting(number(0, open_low=True), "prior variance, used as beta / n_bits", 30.0)
    lam: float = setting(number(0), "ridge of the features -> U regression, as lam * N / d", 1.0)
    n_sampled: int | None = setting(
        optional(integer(1)), "columns of S per iteration (null: n_bits)", None
    )


@dataclass(frozen=True)
class COSDISHSettings(Checked):
    """COSDISH and COSDISH+H (Kang, Li & Zhou 2016)."""

    n_outer: int = setting(integer(1), "T_sto: outer stochastic iterations", 10)
    n_alternations: int = setting(integer(1), "T_alt: alternations per iteration", 3)
    n_sampled: int | None = setting(
        optional(integer(1)), "|Omega|, sampled columns (null: n_bits)", None
    )
    ridge: float = setting(number(0), "the out-of-sample regulariser", 1.0)
    balance: bool = setting(BOOL, "weigh dissimilar pairs as much as similar ones", True)


# ------------------------------------------------------------------------------ deep methods


@dataclass(frozen=True)
class SHDHSettings(Checked):
    """SHDH's code layout and J = E1 + E2 (paper Eq. 5-7, made consistent: docs/method.md)."""

    layout: str = setting(
        choice(*LAYOUTS), "levels (K-1 segments, the root carries nothing) or paper (K)", "levels"
    )
    alpha: float = setting(number(0), "weight of E2 (paper: 1)", 1.0)
    e1: str = setting(choice(*E1_MODES), "levels (Eq. 5 per level) or matrix (Eq. 7/8)", "levels")
    e2: str = setting(
        choice(*E2_MODES), "balance, trace (the paper's -tr(H A H^T)) or none", "balance"
    )
    target: str = setting(
        choice(*TARGETS), "rho target when s^k = 0: signed (-1) or binary (0, Eq. 5)", "signed"
    )
    reduction: str = reduction()
    memory_bank: bool = setting(BOOL, "also pair each batch with past outputs", False)


@dataclass(frozen=True)
class DPSHSettings(Checked):
    """DPSH (Li, Wang & Kang 2016): the quantisation weight, the scale, the memory bank."""

    eta: float = setting(number(0), "weight of the quantisation term (paper: 10)", 10.0)
    reduction: str = reduction()
    memory_bank: bool = setting(BOOL, "the original's bank of all past outputs", False)


@dataclass(frozen=True)
class DSHSettings(Checked):
    """DSH (Liu, Wang, Shan & Chen 2016): the contrastive margin and the pull towards +-1."""

    margin: float | None = setting(
        optional(number(0, open_low=True)),
        "m, the margin on ||u_i - u_j||^2 of dissimilar pairs (null: 2 x bits, the paper's)",
        None,
    )
    alpha: float = setting(number(0), "weight of the pull sum_k ||u_k| - 1| (paper: 0.01)", 0.01)
    reduction: str = reduction()


@dataclass(frozen=True)
class HashNetSettings(Checked):
    """HashNet and HashNet+H (Cao, Long, Wang & Yu 2017): the logit scale and the continuation."""

    alpha: float | None = setting(
        optional(number(0, open_low=True)),
        "logit scale, theta = alpha <h_i, h_j> (null: 10 / bits, the authors' code)",
        None,
    )
    beta_growth: float = setting(
        number(0),
        "continuation beta = sqrt(1 + beta_growth x (epoch - 1)); 1.39: the authors' "
        "(1 + 0.005 t)^0.5 at their 278 steps per epoch",
        1.39,
    )
    reduction: str = reduction()


@dataclass(frozen=True)
class DCHSettings(Checked):
    """DCH (Cao, Long, Liu & Wang 2018): the Cauchy scale and the quantisation weight."""

    gamma: float = setting(
        number(0, open_low=True), "the Cauchy scale gamma (the authors' code: 20)", 20.0
    )
    lam: float = setting(number(0), "lambda, weight of the Cauchy quantisation term", 0.1)
    reduction: str = reduction()


@dataclass(frozen=True)
class DTSHSettings(Checked):
    """DTSH (Wang, Shi & Kitani 2016): the triplet margin and the quantisation weight."""

    margin: float | None = setting(
        optional(number(0)),
        "alpha, the margin of theta_ap - theta_an (null: bits / 2, the authors' code)",
        None,
    )
    lam: float = setting(
        number(0), "lambda, weight of ||u - sgn(u)||^2 (the authors' code: 100)", 100.0
    )
    reduction: str = reduction()


@dataclass(frozen=True)
class OracleSettings(Checked):
    """The classifier oracle: cross-entropy on the finest class, a mean over the batch by default
    (the sum-over-partners scale is SHDH's)."""

    reduction: str = reduction("mean")


# The pointwise methods (a class, a centre or a code per item) average their loss over the batch's
# items, as their papers do; "sum" (train.reduction's default, SHDH's scale) sums over the items.


@dataclass(frozen=True)
class GreedyHashSettings(Checked):
    """GreedyHash (Su, Zhang, Han & Tian 2018): cross-entropy of a classifier on sgn(h) plus
    alpha times the cubic penalty mean ||h| - 1|^3."""

    alpha: float = setting(
        number(0), "weight of the cubic penalty (authors: 0.1 on CIFAR-10, 1 on ImageNet)", 0.1
    )
    reduction: str = reduction("mean")


@dataclass(frozen=True)
class CSQSettings(Checked):
    """CSQ (Yuan et al. 2020): the central similarity to fixed hash centres plus lambda_q times
    the quantisation term mean (|tanh u| - 1)^2."""

    lambda_q: float = setting(
        number(0), "weight of the quantisation term (authors: 1e-3 AlexNet, 0.05 ResNet-50)", 1e-3
    )
    reduction: str = reduction("mean")


@dataclass(frozen=True)
class OrthoHashSettings(Checked):
    """OrthoHash (Hoe et al. 2021): cross-entropy of scaled cosine logits to a fixed +-1
    codebook, with an additive margin on the true class."""

    scale: float = setting(
        number(0, open_low=True), "s, the scale of the cosine logits (paper: 8)", 8.0
    )
    margin: float = setting(number(0), "m, the cosine margin on the true class (paper: 0.2)", 0.2)
    reduction: str = reduction("mean")


@dataclass(frozen=True)
class HPDHSettings(Checked):
    """HPDH (Zhang et al. 2019): a Gaussian class model per tree level, rho_l its inverse
    variance, plus the cube and vertex regularisers; rho runs linearly from rho_finest at the
    finest level to rho_coarsest at the coarsest one below the root."""

    rho_finest: float = setting(
        number(0, open_low=True), "rho of the finest level (authors: 1)", 1.0
    )
    rho_coarsest: float = setting(
        number(0, open_low=True),
        "rho of the coarsest level below the root (authors: 0.5 CIFAR-100, 0.25 NABirds)",
        0.5,
    )
    w_cub: float = setting(
        number(0), "weight of the cube regulariser, over bits (authors: 10)", 10.0
    )
    w_vert: float = setting(
        number(0), "weight of the vertex regulariser, over bits (authors: 0.1)", 0.1
    )
    reduction: str = reduction("mean")
