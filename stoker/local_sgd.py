"""``from stoker.local_sgd import LocalSGD`` (Accelerate's ``accelerate.local_sgd``); see ``stoker/compat/accelerate/local_sgd.py``."""

from .compat.accelerate.local_sgd import LocalSGD

__all__ = ["LocalSGD"]
