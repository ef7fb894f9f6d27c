"""Lightning's ``pytorch_lightning.callbacks.batch_size_finder`` module path, imported as ``stoker.callbacks.batch_size_finder``:
the module ``stoker.tuner.finders`` (``BatchSizeFinder``) under a second name (an alias, as ``model_checkpoint.py``
explains)."""

import sys

from stoker.tuner import finders

sys.modules[__name__] = finders
