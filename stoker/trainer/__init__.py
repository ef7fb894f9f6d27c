"""The Trainer layer: :class:`Trainer` runs a :class:`TrainingModule` on an Accelerator.

This is the core Trainer (its own arguments only); ``stoker.Trainer`` adds Lightning's names
(``stoker/compat/lightning/``).
"""

import os

from .module import TrainingModule
from .options import RunOptions
from .core_trainer import Trainer
from .iterables import CombinedLoader
from .spawn import WorkerError

LightningModule = TrainingModule  # Lightning's name (a script's `pl.LightningModule` after renaming its imports)

# Lightning's module paths under this package (stoker.trainer.trainer) are faces kept in stoker/faces/trainer/,
# found through this __path__ entry: the core itself imports nothing from them (nor from compat).
__path__.append(os.path.join(os.path.dirname(os.path.dirname(__file__)), "faces", "trainer"))

__all__ = ["CombinedLoader", "LightningModule", "RunOptions", "Trainer", "TrainingModule", "WorkerError"]
