"""Lightning's ``pytorch_lightning.callbacks.stochastic_weight_avg`` module path, imported as
``stoker.callbacks.stochastic_weight_avg``:
the module ``stoker.callbacks.swa`` (``StochasticWeightAveraging``) under a second name.

An alias rather than a re-export, as ``model_checkpoint.py`` explains: what a script patches by this name reaches
the module the callback runs in.
"""

import sys

from stoker.callbacks import swa

sys.modules[__name__] = swa
