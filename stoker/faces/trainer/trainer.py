"""Lightning's ``pytorch_lightning.trainer.trainer`` module path, imported as ``stoker.trainer.trainer``: its
``Trainer`` is ``stoker.Trainer``, the core Trainer with Lightning's names (``stoker/compat/lightning/trainer.py``).
The core Trainer is ``stoker/trainer/core_trainer.py``."""

from stoker.compat.lightning.trainer import Trainer

__all__ = ["Trainer"]
