"""A deep method's objective as settings that make its loss: what a deep hasher takes as its
`objective`, what the training loop calls, and what every checkpoint records.

SHDHObjective (SHDH's J, Eq. 7), DPSHObjective (DPSH's likelihood) and OracleObjective (the
classifier oracle's cross-entropy) hold their settings (shdh.core.loss_settings: the same fields
params.yaml and a saved params.json hold), check them, and make a `Loss` for a code layout from
the loss functions of shdh.core.losses. The loop knows no method: it calls the Loss it is given.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

import torch

from shdh.core.loss_settings import (
    E1_MODES,
    E2_MODES,
    REDUCTIONS,
    TARGETS,
    DPSHLossSettings,
    SHDHLossSettings,
)
from shdh.core.losses import check_choice, dpsh_loss, shdh_loss

Bank = tuple[torch.Tensor, torch.Tensor] | None  # detached past outputs and their ancestors


def _check_weight(name: str, value: Any, where: str) -> None:
    """A loss weight (SHDH's alpha, DPSH's eta) must be a finite number >= 0; anything else,
    a string or a bool from a hand-edited params.json included, is refused by name."""
    ok = isinstance(value, int | float) and not isinstance(value, bool)
    if not ok or not 0 <= value < math.inf:
        raise ValueError(f"{where}: {name} must be a finite number >= 0, got {value!r}")


@dataclass(frozen=True)
class Loss:
    """A batch objective as the training loop calls it, `loss(z, anc, bank) -> (loss, parts)`,
    with the settings it was made from. The loop knows no method: it stores `settings` in every
    checkpoint and resumes a checkpoint only under the same ones."""

    fn: Callable[..., tuple[torch.Tensor, dict[str, torch.Tensor]]]  # fn(z, anc, bank_z, bank_anc)
    settings: dict[str, Any] = field(default_factory=dict)

    def __call__(
        self, z: torch.Tensor, anc: torch.Tensor, bank: Bank
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        bank_z, bank_anc = bank if bank is not None else (None, None)
        return self.fn(z, anc, bank_z=bank_z, bank_anc=bank_anc)


@dataclass(frozen=True)
class SHDHObjective(SHDHLossSettings):
    """SHDH's own settings (their fields and defaults:
    shdh.core.loss_settings.SHDHLossSettings; see shdh.core.losses), checked, and the loss
    they make.
    """

    def __post_init__(self) -> None:
        for name, allowed in (
            ("e1", E1_MODES),
            ("e2", E2_MODES),
            ("target", TARGETS),
            ("reduction", REDUCTIONS),
        ):
            check_choice(name, getattr(self, name), allowed, "SHDHObjective")
        _check_weight("alpha", self.alpha, "SHDHObjective")

    def for_layout(
        self,
        segment_sizes: Sequence[int],
        segment_levels: Sequence[int],
        layer_weights: Sequence[float],
    ) -> Loss:
        """J (Eq. 7) for a code of these segments, as the training loop calls it."""
        fn = partial(
            shdh_loss,
            segment_sizes=segment_sizes,
            segment_levels=segment_levels,
            layer_weights=layer_weights,
            **asdict(self),
        )
        return Loss(fn, {"loss": "shdh", **asdict(self)})


@dataclass(frozen=True)
class DPSHObjective(DPSHLossSettings):
    """DPSH's own settings (their fields and defaults:
    shdh.core.loss_settings.DPSHLossSettings), checked, and the loss they make."""

    def __post_init__(self) -> None:
        check_choice("reduction", self.reduction, REDUCTIONS, "DPSHObjective")
        _check_weight("eta", self.eta, "DPSHObjective")

    def for_layout(self, *layout: Sequence[Any]) -> Loss:
        """The batch loss for DPSH's one segment. It takes SHDHObjective.for_layout's arguments
        (segment sizes, levels, level weights), but they do not enter it: s_ij is the finest
        label. Labels are checked once by the caller
        (check_labelled), not per step: a label check reads tensor values, a host sync."""
        fn = partial(dpsh_loss, eta=float(self.eta), reduction=self.reduction, check_labels=False)
        return Loss(fn, {"loss": "dpsh", **asdict(self)})


@dataclass(frozen=True)
class OracleObjective:
    """The classifier oracle's settings (shdh.hashers.oracle): cross-entropy on the finest
    class, averaged over the batch by default (the sum-over-partners scale is SHDH's)."""

    reduction: str = "mean"  # "mean" | "sum" over the batch's items

    def __post_init__(self) -> None:
        check_choice("reduction", self.reduction, REDUCTIONS, "OracleObjective")

    def for_classes(self, classes: Sequence[int]) -> Loss:
        """Cross-entropy of the class scores z (B, C) against each item's finest node, its row
        in `classes` (the sorted finest node ids the network has one output for)."""
        classes = torch.as_tensor(classes)
        lookup = torch.full((int(classes.max()) + 1,), -1, dtype=torch.long)
        lookup[classes] = torch.arange(len(classes))
        reduction = self.reduction
        on_device = [lookup]

        def cross_entropy(
            z: torch.Tensor, anc: torch.Tensor, bank_z: Any = None, bank_anc: Any = None
        ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
            if on_device[0].device != anc.device:  # moved once, not copied to the GPU every step
                on_device[0] = lookup.to(anc.device)
            target = on_device[0][anc[:, -1].long()]
            loss = torch.nn.functional.cross_entropy(z.float(), target, reduction=reduction)
            accuracy = (z.argmax(dim=1) == target).float().mean()
            return loss, {"accuracy": accuracy.detach()}

        return Loss(cross_entropy, {"loss": "cross-entropy", "reduction": reduction})


# The deep hashers' defaults, one instance each (frozen, so one serves all; as loop.DEFAULT_LOOP).
DEFAULT_SHDH_OBJECTIVE = SHDHObjective()


DEFAULT_DPSH_OBJECTIVE = DPSHObjective()


DEFAULT_ORACLE_OBJECTIVE = OracleObjective()


def flat_objective(params: Mapping[str, Any]) -> dict[str, Any]:
    """A deep hasher's parameters with its `objective` spelled out as the settings it holds
    (alpha, e1, ...; eta; reduction), the names params.yaml, the MLflow runs and the records
    that compare fits (a checkpoint's hasher.json, a bundle's fit record) use for them."""
    flat = {k: v for k, v in params.items() if k != "objective"}
    if "objective" in params:
        flat.update(asdict(params["objective"]))
    return flat
