"""The Trainer layer: :class:`Trainer` runs a :class:`TrainingModule` on an Accelerator."""

from .module import TrainingModule
from .trainer import Trainer

__all__ = ["Trainer", "TrainingModule"]
