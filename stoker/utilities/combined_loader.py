"""Lightning's ``utilities.combined_loader`` module path: ``CombinedLoader`` (stoker's is in
``stoker/trainer/iterables.py``)."""

from ..trainer.iterables import CombinedLoader

__all__ = ["CombinedLoader"]
