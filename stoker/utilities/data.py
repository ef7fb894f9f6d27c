"""Lightning's ``utilities.data`` module path: ``has_len_all_ranks``, the question "does this loader know its length
on every process?" that a script asks before calling ``len()`` on a loader."""

from __future__ import annotations

import warnings
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from ..compat.lightning.strategies import Strategy


def has_len_all_ranks(dataloader: Any, strategy: Strategy,
                      allow_zero_length_dataloader_with_multiple_devices: bool = False) -> bool:
    """True when ``len(dataloader)`` works; then the lengths are summed over the processes through ``strategy``
    (``trainer.strategy``): a loader empty on every process gives a warning, one empty on this process only (while
    others have batches) raises ``RuntimeError`` unless allowed, since the processes would then run different
    numbers of steps and wait for each other forever.

    Example:
        >>> from stoker import Trainer
        >>> has_len_all_ranks([1, 2, 3], Trainer(accelerator="cpu").strategy)
        True
    """
    try:
        local = len(dataloader)
    except (TypeError, NotImplementedError):  # an iterable without a length (or one whose __len__ refuses)
        return False
    total = int(strategy.reduce(torch.tensor(float(local)), reduce_op="sum"))
    name = type(dataloader).__name__
    if total == 0:
        warnings.warn(f"Total length of `{name}` across ranks is zero. Please make sure this was your intention. (The "
                      f"{name} has no batches on any process; check the dataset and the batch size.)", stacklevel=2)
    elif local == 0:
        message = (f"The {name} has no batches on this process while others have some: the processes would run "
                   "different numbers of steps. Give every process data (e.g. a larger dataset or drop_last=False).")
        if not allow_zero_length_dataloader_with_multiple_devices:
            raise RuntimeError(message)
        warnings.warn(message, stacklevel=2)
    return True


__all__ = ["has_len_all_ranks"]
