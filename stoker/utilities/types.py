"""Lightning's type aliases for hook signatures (``pytorch_lightning.utilities.types``), for scripts that annotate
with them. They describe what stoker accepts; nothing checks them at run time."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Union

from torch import Tensor
from torch.optim import Optimizer
from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau
from torch.utils.data import DataLoader

# The record trainer.lr_scheduler_configs holds (a dataclass, as Lightning's is), importable under Lightning's path.
from stoker.callbacks.scheduler_config import LRSchedulerConfig

STEP_OUTPUT = Union[Tensor, Mapping[str, Any], None]
"""What ``training_step`` and the evaluation steps return: a loss, a dict with ``"loss"``, or None."""

LRSchedulerTypeUnion = Union[LRScheduler, ReduceLROnPlateau]
LRSchedulerConfigType = Mapping[str, Any]
"""The dict form of a scheduler in ``configure_optimizers``' return value: ``{"scheduler": ..., "interval": "epoch" |
"step", "frequency": n, "monitor": ...}``."""

OptimizerLRScheduler = Union[
    Optimizer,
    Sequence[Optimizer],
    tuple[Sequence[Optimizer], Sequence[Union[LRSchedulerTypeUnion, LRSchedulerConfigType]]],
    Mapping[str, Any],
    Sequence[Mapping[str, Any]],
    None,
]
"""What ``configure_optimizers`` returns (the forms are listed in ``stoker/trainer/optim.py``)."""

TRAIN_DATALOADERS = Union[DataLoader, Iterable[Any], Mapping[str, Any], Sequence[Any]]
EVAL_DATALOADERS = Union[DataLoader, Sequence[DataLoader]]

__all__ = ["EVAL_DATALOADERS", "LRSchedulerConfig", "LRSchedulerConfigType", "LRSchedulerTypeUnion",
           "OptimizerLRScheduler", "STEP_OUTPUT", "TRAIN_DATALOADERS"]
