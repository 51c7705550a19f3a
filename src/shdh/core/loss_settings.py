"""The deep losses' settings: their fields, their choices and their defaults.

shdh.core.losses makes a loss from them; the method catalogue (shdh.hashers.method_catalogue)
names them as a method's `objective`, and checking params.yaml reads them, which is why they sit
in a module of plain fields that does not import torch.
"""

from __future__ import annotations

from dataclasses import dataclass

E1_MODES = ("levels", "matrix")
TARGETS = ("signed", "binary")
E2_MODES = ("balance", "trace", "none")
REDUCTIONS = ("sum", "mean")


@dataclass(frozen=True)
class SHDHLossSettings:
    """SHDH's objective: the forms of E1 and E2 and their scale (shdh.core.losses)."""

    alpha: float = 1.0  # weight of E2 (paper: 1)
    e1: str = "levels"  # "levels" (Eq. 5 per level) | "matrix" (Eq. 7/8 with its scale fixed)
    e2: str = "balance"  # "balance" | "trace" (the paper's -tr(H A H^T)) | "none"
    target: str = "signed"  # rho target for s^k = 0: "signed" -1 | "binary" 0 (Eq. 5)
    reduction: str = "sum"  # "sum" over partners (leaves the h~=0 saddle) | "mean" (paper scale)


@dataclass(frozen=True)
class DPSHLossSettings:
    """DPSH's objective (Li, Wang & Kang 2016): the quantisation weight and the scale."""

    eta: float = 10.0  # weight of the quantisation term (paper: 10)
    reduction: str = "sum"  # as SHDHLossSettings.reduction; see shdh.core.losses.dpsh_loss
