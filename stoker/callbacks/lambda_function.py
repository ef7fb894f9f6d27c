"""`LambdaCallback`: a callback made of plain functions, one per hook, for a hook or two without a class."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Any

from stoker.callbacks.base import HOOKS, Callback

__all__ = ["LambdaCallback"]


class LambdaCallback(Callback):
    """Calls the function given for each hook with the hook's arguments (``trainer, module, ...``).

    Example:
        >>> from stoker.callbacks import LambdaCallback
        >>> cb = LambdaCallback(on_train_epoch_end=lambda trainer, module: print(trainer.current_epoch))

    Raises:
        ValueError: A keyword is not a hook name (with a did-you-mean).
        TypeError: A value is not callable.
    """

    def __init__(self, **hooks: Callable[..., Any]) -> None:
        for name, fn in hooks.items():
            if name not in HOOKS:
                close = difflib.get_close_matches(name, HOOKS, n=1, cutoff=0.6)
                hint = f" Did you mean {close[0]!r}?" if close else ""
                raise ValueError(f"LambdaCallback({name}=...): {name!r} is not a hook, so it would never be called."
                                 f"{hint}")
            if not callable(fn):
                raise TypeError(f"LambdaCallback({name}={fn!r}): expected a function of the hook's arguments "
                                f"(trainer, module, ...), got {type(fn).__name__}.")
            # An instance attribute: the Trainer calls it as it would call the method, with (trainer, module, ...).
            setattr(self, name, fn)
