"""Lightning's ``pytorch_lightning.callbacks.model_checkpoint`` module path, imported as
``stoker.callbacks.model_checkpoint``: the very module ``stoker.callbacks.checkpoint`` under a second name.

An alias rather than a re-export, so that what a script does to the module by this name (replacing its ``time``
in a test, as Lightning's tests do) reaches the module that `ModelCheckpoint` runs in.
"""

import sys

from stoker.callbacks import checkpoint

sys.modules[__name__] = checkpoint
