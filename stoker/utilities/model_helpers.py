"""Lightning's ``utilities.model_helpers.is_overridden`` for renamed scripts: whether a module, data module or
callback defines a hook itself (the Trainer's own test, ``defines_hook``, against the matching base class)."""

from __future__ import annotations

from typing import Any

__all__ = ["is_overridden"]


def is_overridden(method_name: str, instance: Any = None, parent: type | None = None) -> bool:
    """Whether ``instance`` defines ``method_name`` itself rather than inheriting stoker's default (None: False).

    Example:
        >>> is_overridden("training_step", my_module)   # doctest: +SKIP
        True
    """
    from stoker.callbacks.base import Callback
    from stoker.trainer.datamodule import DataModule
    from stoker.trainer.hooks import defines_hook
    from stoker.trainer.module import TrainingModule

    if instance is None:
        return False
    if parent is None:
        parent = next((base for base in (TrainingModule, DataModule, Callback) if isinstance(instance, base)), None)
        if parent is None:
            raise ValueError(f"is_overridden({method_name!r}, ...): expected a TrainingModule, DataModule or Callback, "
                             f"got {type(instance).__name__}; pass parent=the base class to compare with.")
    return defines_hook(instance, method_name, parent)
