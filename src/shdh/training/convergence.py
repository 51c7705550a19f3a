"""When a deep fit has trained enough: the validation split and the learning-rate schedules.

A fixed number of epochs stops every method wherever that number falls on its curve; the GPU
table once stopped while DPSH and the oracle were still improving. The "plateau" schedule
applies one rule to every deep method alike instead:

1. `val_size` training items are held out (seeded by the fit's seed, never the queries) and,
   after every epoch, ranked against a fixed sample of the other training items with the
   method's own codes and distance; their database-ideal NDCG@100 is the validation score.
2. Once the score has gained less than `min_delta` over its best for more than `patience`
   epochs, the learning rate is multiplied by `lr_decay` (torch's ReduceLROnPlateau, so its
   state is checkpointed and a resumed fit decides exactly as an uninterrupted one).
3. The plateau after `max_decays` decays ends the fit, with the weights of its last epoch;
   `epochs` caps it. A fit the cap ends while its score is still gaining (`still_improving`)
   has not converged by this rule, and says so.

The "step" schedule is the paper's fixed decay: it holds out no items and trains on all of them,
so a CPU fit's numbers do not depend on this module.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from shdh.training.loop_settings import TrainConfig
from shdh.training.state import State

# Validation items are ranked against this many other training items: a fixed sample keeps the
# score's cost a few percent of a GPU epoch whatever the training set's size.
VAL_DATABASE_SIZE = 10_000
VAL_METRIC = "val_ndcg_at_100"  # the history key of the validation score
STOP_KEY = "stopped"  # true in the history entry of the epoch that ended a "plateau" fit


@dataclass(frozen=True)
class ValidationSplit:
    """Positions into the caller's train_idx: what the fit trains on, the held-out queries and
    their database (a sample of the training positions)."""

    train: np.ndarray
    queries: np.ndarray
    database: np.ndarray


def validation_split(n_items: int, val_size: int, seed: int) -> ValidationSplit:
    """Hold out val_size of n_items (seeded by the fit's seed, so every method's fit with one
    seed holds out the same items); val_size = 0 keeps every item for training."""
    everything = np.arange(n_items)
    if val_size == 0:
        empty = np.zeros(0, dtype=np.int64)
        return ValidationSplit(everything, empty, empty)
    if val_size > n_items - 2:
        raise ValueError(
            f"train: val_size={val_size} leaves fewer than 2 of the {n_items} training items "
            "to train on"
        )
    rng = np.random.default_rng([seed, 2])  # [seed, 1] draws the probe set
    held = np.zeros(n_items, dtype=bool)
    held[rng.choice(n_items, size=val_size, replace=False)] = True
    train = everything[~held]
    database = np.sort(rng.choice(train, size=min(VAL_DATABASE_SIZE, len(train)), replace=False))
    return ValidationSplit(train, everything[held], database)


def make_scheduler(
    config: TrainConfig, optimizer: torch.optim.Optimizer
) -> torch.optim.lr_scheduler.LRScheduler | torch.optim.lr_scheduler.ReduceLROnPlateau:
    if config.schedule == "plateau":
        return torch.optim.lr_scheduler.ReduceLROnPlateau(
            optimizer,
            mode="max",
            factor=config.lr_decay,
            patience=config.patience,
            threshold=config.min_delta,
            threshold_mode="abs",
        )
    return torch.optim.lr_scheduler.StepLR(
        optimizer, step_size=config.lr_decay_every, gamma=config.lr_decay
    )


def step_schedule(
    config: TrainConfig,
    scheduler: torch.optim.lr_scheduler.LRScheduler | torch.optim.lr_scheduler.ReduceLROnPlateau,
    score: float | None,
) -> bool:
    """Advance the schedule after an epoch (score: its validation score, None without one);
    True when the fit ends here (the plateau after max_decays decays)."""
    if config.schedule != "plateau":
        scheduler.step()
        return False
    if score is None:
        raise ValueError("train: schedule 'plateau' needs a validation score every epoch")
    scheduler.step(score)
    lr = scheduler.optimizer.param_groups[0]["lr"]
    return decays(config, lr) > config.max_decays


def decays(config: TrainConfig, lr: float) -> int:
    """How many times the plateau schedule has multiplied the learning rate by lr_decay."""
    if lr >= config.lr or config.lr_decay == 1:
        return 0
    return round(math.log(lr / config.lr) / math.log(config.lr_decay))


# How a plateau fit ended, read from its history alike by the loop's warning, the fit's MLflow
# tag (ENDED_BY_TAG) and the convergence table of docs/results-gpu.md.
ENDED_BY_TAG = "ended_by"
BY_THE_RULE = "the rule"
AT_THE_CAP_GAINING = "the epoch cap, still gaining"
AT_THE_CAP_STALLED = "the epoch cap, stalled"


def ended_by(history: list[dict], patience: int, min_delta: float) -> str | None:
    """BY_THE_RULE, AT_THE_CAP_GAINING or AT_THE_CAP_STALLED for a plateau fit's history (the
    rule's patience and min_delta); None for a fit of another schedule, which has no stop."""
    if not history or STOP_KEY not in history[-1]:
        return None
    if history[-1][STOP_KEY]:
        return BY_THE_RULE
    gaining = still_improving(history, patience, min_delta)
    return AT_THE_CAP_GAINING if gaining else AT_THE_CAP_STALLED


def ended_by_tag(history: list[dict], patience: int, min_delta: float) -> dict[str, str]:
    """{ENDED_BY_TAG: ended_by(...)} for a fit's MLflow run; nothing for another schedule."""
    how = ended_by(history, patience, min_delta)
    return {} if how is None else {ENDED_BY_TAG: how}


def still_improving(history: list[dict], patience: int, min_delta: float) -> bool:
    """Whether a plateau fit's validation score gained min_delta over its earlier best within
    its last patience + 1 epochs, so that the rule had not seen a stall when the history ended.

    Read from the history alone, so a fit record tells it as well as the loop: a fit that the
    epoch cap ended in this state is cut short, not converged (the run-to-run spread of DPSH on
    a GPU showed one such fit, still rising at the cap)."""
    scores = [e[VAL_METRIC] for e in history if VAL_METRIC in e]
    recent, earlier = scores[-(patience + 1) :], scores[: -(patience + 1)]
    if not recent:
        return False
    return not earlier or max(recent) >= max(earlier) + min_delta


# validate(model, query_idx, database_idx) -> the validation score (Schedule): indices
# into the images, the model as trained so far.
Validate = Callable[[torch.nn.Module, np.ndarray, np.ndarray], float]


@dataclass
class Schedule:
    """After each epoch: the validation score on the held-out items (none without them), the
    learning rate schedule's step on it and, with the plateau schedule, whether to stop."""

    config: TrainConfig
    validate: Validate | None
    queries: np.ndarray
    database: np.ndarray

    def after_epoch(self, entry: dict[str, Any], state: State) -> bool:
        """Whether the fit stops here; the score and its seconds are entered in `entry`."""
        score = self._score(entry, state.model)
        stopped = step_schedule(self.config, state.scheduler, score)
        if self.config.schedule == "plateau":
            entry[STOP_KEY] = stopped
        return stopped

    def _score(self, entry: dict[str, Any], model: torch.nn.Module) -> float | None:
        if len(self.queries) == 0:
            return None
        start = time.perf_counter()
        score = float(self.validate(model, self.queries, self.database))
        entry[VAL_METRIC] = score
        entry["val_seconds"] = time.perf_counter() - start
        return score
