"""``from stoker.local_sgd import LocalSGD`` (Accelerate's ``accelerate.local_sgd``); a face over
``stoker/compat/accelerate/local_sgd.py``."""

from .compat.accelerate.local_sgd import LocalSGD

__all__ = ["LocalSGD"]
