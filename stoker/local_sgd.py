"""``from stoker.local_sgd import LocalSGD`` (Accelerate's ``accelerate.local_sgd``); see ``stoker/accelerator/local_sgd.py``."""

from .accelerator.local_sgd import LocalSGD

__all__ = ["LocalSGD"]
