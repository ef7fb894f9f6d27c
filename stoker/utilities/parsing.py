"""``pytorch_lightning.utilities.parsing``'s names: ``AttributeDict`` (``hparams``' type) and ``is_picklable``."""

from __future__ import annotations

import pickle
from typing import Any

from stoker.trainer.hparams import AttributeDict


def is_picklable(obj: Any) -> bool:
    """Whether ``pickle.dumps(obj)`` works (a lambda or an open file does not).

    Example:
        >>> is_picklable({"lr": 0.1}), is_picklable(lambda x: x)
        (True, False)
    """
    try:
        pickle.dumps(obj)
    except (pickle.PicklingError, AttributeError, TypeError):
        return False
    return True


__all__ = ["AttributeDict", "is_picklable"]
