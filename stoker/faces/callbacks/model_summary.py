"""Lightning's ``pytorch_lightning.callbacks.model_summary`` module path, imported as
``stoker.callbacks.model_summary``:
the module ``stoker.callbacks.summary`` (``ModelSummary``) under a second name.

An alias rather than a re-export, as ``model_checkpoint.py`` explains: what a script patches by this name reaches
the module the callback runs in.
"""

import sys

from stoker.callbacks import summary

sys.modules[__name__] = summary
