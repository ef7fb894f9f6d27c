"""The Trainer layer: :class:`Trainer` runs a :class:`TrainingModule` on an Accelerator."""

from .module import TrainingModule
from .trainer import Trainer

LightningModule = TrainingModule  # Lightning's name (a script's `pl.LightningModule` after renaming its imports)

__all__ = ["LightningModule", "Trainer", "TrainingModule"]
