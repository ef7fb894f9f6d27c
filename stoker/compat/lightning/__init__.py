"""Lightning's names over the core Trainer: ``stoker.Trainer`` (:class:`Trainer` here) takes every argument,
attribute and entry-point keyword a Lightning 2.x script uses, and translates them into the core's own objects
(``stoker.trainer.Trainer``, ``RunOptions``, callbacks). The core never imports this package."""

from .trainer import Trainer

__all__ = ["Trainer"]
