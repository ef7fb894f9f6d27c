"""`LRSchedulerConfig`: one learning-rate scheduler and when it steps.

The Trainer builds these from ``configure_optimizers`` (``stoker.trainer.optim`` parses every accepted form and steps
them) and keeps them in ``trainer.lr_scheduler_configs``; callbacks read them (`LearningRateMonitor`) or build and
replace one (`StochasticWeightAveraging` switches to ``SWALR``). The record lives here, in the callbacks layer below
the Trainer, so that a callback can build one without importing the Trainer's modules; the Trainer imports it from
here, and ``stoker.trainer.optim.LRSchedulerConfig`` is the same class.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

__all__ = ["LRSchedulerConfig"]


@dataclass
class LRSchedulerConfig:
    """One scheduler and when it steps (``trainer.lr_scheduler_configs`` holds these).

    Attributes:
        scheduler: The scheduler, as ``configure_optimizers`` returned it (the Trainer's Accelerator also holds it,
            prepared, for its checkpoints).
        interval: ``"step"`` (optimizer steps) or ``"epoch"``.
        frequency: Step every this many intervals.
        monitor: For ``ReduceLROnPlateau``: the ``callback_metrics`` name whose value it gets.
        strict: Raise when ``monitor`` was not logged (else skip that step with a warning).
        name: A display name (e.g. for ``LearningRateMonitor``).
        reduce_on_plateau: Whether it is a ``ReduceLROnPlateau`` (stepped with the ``monitor`` value); None (the
            default): read from the scheduler.

    Example:
        >>> config = trainer.lr_scheduler_configs[0]               # doctest: +SKIP
        >>> config.interval, config.frequency, config.scheduler.get_last_lr()  # doctest: +SKIP
        ('step', 1, [0.001])
    """

    scheduler: Any
    interval: str = "epoch"
    frequency: int = 1
    monitor: str | None = None
    strict: bool = True
    name: str | None = None
    reduce_on_plateau: bool | None = None

    def __post_init__(self) -> None:
        # Decided once: the loop reads a plain attribute.
        scheduler = self.scheduler
        if self.reduce_on_plateau is None:
            self.reduce_on_plateau = isinstance(scheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)
        # False only for a scheduler of another kind, which manual optimization allows (the module steps it)
        self.is_torch_scheduler = self.reduce_on_plateau or isinstance(scheduler, torch.optim.lr_scheduler.LRScheduler)

    def __getitem__(self, key: str) -> Any:  # dict-style access, as some callbacks expect
        return getattr(self, key)
