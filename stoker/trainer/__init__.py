"""The Trainer layer: :class:`Trainer` runs a :class:`TrainingModule` on an Accelerator.

This is the core Trainer (its own arguments only); ``stoker.Trainer`` adds Lightning's names
(``stoker/compat/lightning/``).
"""

from .module import TrainingModule
from .options import RunOptions
from .core_trainer import Trainer
from .iterables import CombinedLoader

LightningModule = TrainingModule  # Lightning's name (a script's `pl.LightningModule` after renaming its imports)

__all__ = ["CombinedLoader", "LightningModule", "RunOptions", "Trainer", "TrainingModule"]
