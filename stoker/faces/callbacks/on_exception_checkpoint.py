"""Lightning's ``pytorch_lightning.callbacks.on_exception_checkpoint`` module path, imported as
``stoker.callbacks.on_exception_checkpoint``:
the module ``stoker.callbacks.on_exception`` (``OnExceptionCheckpoint``) under a second name.

An alias rather than a re-export, as ``model_checkpoint.py`` explains: what a script patches by this name reaches
the module the callback runs in.
"""

import sys

from stoker.callbacks import on_exception

sys.modules[__name__] = on_exception
