"""Lightning's ``pytorch_lightning.trainer.trainer`` module path: its ``Trainer`` is ``stoker.Trainer``, the core
Trainer with Lightning's names (``stoker/compat/lightning/trainer.py``). A face: the core Trainer is in
``core_trainer.py`` and nothing in the core imports this module."""

from ..compat.lightning.trainer import Trainer

__all__ = ["Trainer"]
