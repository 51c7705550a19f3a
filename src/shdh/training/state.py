"""What a training run carries from epoch to epoch and a checkpoint restores: the network, the
objective's own state, the optimiser and schedule, the history, the probe codes and the memory
bank.
"""

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from shdh.nets.hashing import HashingNet
from shdh.training.loop_settings import TrainConfig

SGD_KERNELS = ("fused", "foreach")  # an SGD param group's implementation, not its arithmetic


@dataclass
class State:
    """What a checkpoint restores: the network, the objective (its parameters and buffers: a
    classifier, hash centres, class means), the optimiser and schedule, the history, the probe
    codes and the memory bank (empty without one)."""

    model: HashingNet
    objective: nn.Module
    optimizer: torch.optim.Optimizer
    scheduler: Any  # StepLR or ReduceLROnPlateau (shdh.training.convergence.make_scheduler)
    history: list[dict[str, float]]
    probe_codes: torch.Tensor
    bank_z: torch.Tensor
    bank_filled: torch.Tensor
    epoch: int = 0

    def load(self, ckpt: dict[str, Any], memory_bank: bool, device: torch.device) -> None:
        """Continue from a checkpoint: weights, optimiser, schedule, history and RNG state."""
        self.model.load_state_dict(ckpt["model"])
        self.objective.load_state_dict(ckpt["objective"])
        # torch restores a group's kernel choice with its hyperparameters; the kernels are this
        # run's to choose (a GPU fit's fused SGD would otherwise follow its checkpoint to a CPU)
        kernels = [{k: g[k] for k in SGD_KERNELS if k in g} for g in self.optimizer.param_groups]
        self.optimizer.load_state_dict(ckpt["optimizer"])
        for group, chosen in zip(self.optimizer.param_groups, kernels, strict=True):
            group.update(chosen)
        self.scheduler.load_state_dict(ckpt["scheduler"])
        self.history, self.epoch = list(ckpt["history"]), int(ckpt["epoch"])
        self.probe_codes = ckpt["probe_codes"]
        if memory_bank:
            self.bank_z.copy_(ckpt["bank_z"])
            self.bank_filled.copy_(ckpt["bank_filled"])
        torch.set_rng_state(ckpt["rng_cpu"])
        if device.type == "cuda" and ckpt.get("rng_cuda") is not None:
            torch.cuda.set_rng_state(ckpt["rng_cuda"], device)


def make_optimizer(
    config: TrainConfig,
    model: torch.nn.Module,
    device: torch.device,
    objective: torch.nn.Module | None = None,
) -> torch.optim.SGD:
    """The paper's SGD with momentum and weight decay; one fused kernel where config.fused_sgd
    asks for it on a GPU (fused=None keeps torch's choice: the CPU's fits stay bit for bit).
    With config.backbone_lr != 1 the head (group 0, whose lr the history logs) and the backbone
    (group 1, lr x backbone_lr) are two groups; the schedule scales both. The objective's own
    parameters (GreedyHash's classifier) train at the head's rate, after the network's."""
    own = list(objective.parameters()) if objective is not None else []
    params: Any = list(model.parameters()) + own
    if config.backbone_lr != 1.0:
        head = [p for name, p in model.named_parameters() if not name.startswith("backbone.")]
        body = [p for name, p in model.named_parameters() if name.startswith("backbone.")]
        params = [{"params": head + own}, {"params": body, "lr": config.lr * config.backbone_lr}]
    return torch.optim.SGD(
        params,
        lr=config.lr,
        momentum=config.momentum,
        weight_decay=config.weight_decay,
        fused=True if config.fused_sgd and device.type == "cuda" else None,
    )
