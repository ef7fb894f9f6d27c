"""Lightning's ``pytorch_lightning.callbacks.callback`` module path, imported as
``stoker.callbacks.callback``:
the module ``stoker.callbacks.base`` (``Callback``) under a second name.

An alias rather than a re-export, as ``model_checkpoint.py`` explains: what a script patches by this name reaches
the module the callback runs in.
"""

import sys

from stoker.callbacks import base

sys.modules[__name__] = base
