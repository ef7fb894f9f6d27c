"""Tuning before a run: the learning-rate finder and the batch-size search, reached through `Tuner`.

``tuning.py`` (``Tuner``, Lightning's ``lightning.pytorch.tuner.tuning``), ``lr_finder.py`` (the sweep and its
``LRFinder`` result), ``batch_size_scaling.py`` (the searches), ``trial.py`` (trial runs that leave no trace),
``finders.py`` (the callbacks ``LearningRateFinder`` / ``BatchSizeFinder``, also in ``stoker.callbacks``). Nothing
here is imported by ``import stoker``.
"""

from stoker.tuner.lr_finder import LRFinder
from stoker.tuner.tuning import Tuner

__all__ = ["LRFinder", "Tuner"]
