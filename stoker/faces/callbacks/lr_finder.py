"""Lightning's ``pytorch_lightning.callbacks.lr_finder`` module path, imported as ``stoker.callbacks.lr_finder``:
the module ``stoker.tuner.finders`` (``LearningRateFinder``) under a second name (an alias, as ``model_checkpoint.py``
explains)."""

import sys

from stoker.tuner import finders

sys.modules[__name__] = finders
