"""A deep method from outside the package, in this one file, as a user adds their own: its
settings dataclass, its objective (the loss), its class and its catalogue entry. Nothing else in
the project names it; tests/unit/test_toy_deep_method.py registers TOY_DEEP for one test and
follows it through training, saving, the settings' schema, the DVC stages and the compiled
pipeline.

The loss: the relaxed codes' normalised inner product fitted to +target for pairs of the same
finest label and to -target for the others, over the batch's pairs (a least-squares pairwise
loss of the kind SHDH's E1 is).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from shdh.core.batch_pairs import finest_nodes, same_finest
from shdh.hashers.deep import DeepHasher
from shdh.hashers.method_catalogue import Method
from shdh.hashers.method_settings import reduction
from shdh.runtime.value_checks import Checked, number, setting
from shdh.training.objective import Bank, Objective


@dataclass(frozen=True)
class ToyDeepSettings(Checked):
    target: float = setting(
        number(0, 1, open_low=True), "the inner product similar pairs are fitted to", 0.8
    )
    reduction: str = reduction()  # train.reduction, which every deep method shares


class ToyDeepObjective(Objective):
    """mean or per-anchor sum over pairs i != j of (<tanh z_i, tanh z_j> / L - t_ij)^2, with
    t_ij = +target for the same finest label and -target otherwise."""

    name: ClassVar[str] = "toy-deep"

    def forward(
        self, z: torch.Tensor, anc: torch.Tensor, bank: Bank = None
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        h = torch.tanh(z)  # (B, L)
        rho = h @ h.T / h.shape[1]  # (B, B)
        leaf = finest_nodes(anc, "anc", check=False)
        same = same_finest(leaf, leaf).to(h.dtype)
        t = self.settings.target * (2.0 * same - 1.0)
        off = ~torch.eye(len(h), dtype=torch.bool, device=h.device)
        total = torch.where(off, (rho - t) ** 2, 0.0).sum()
        n_pairs = len(h) * (len(h) - 1)
        loss = total / (len(h) if self.settings.reduction == "sum" else n_pairs)
        return loss, {"e1": loss.detach()}


class ToyDeep(DeepHasher):
    """The toy's hasher: the shared deep hasher with the toy's objective, one segment."""

    supervision: ClassVar[str | None] = "label"
    objective = ToyDeepObjective


TOY_DEEP = Method(
    "toy-deep", "deep", "tests.unit.toy_deep_method", "ToyDeep", ToyDeepSettings, "Toy deep"
)
