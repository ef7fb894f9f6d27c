"""Lightning's ``pytorch_lightning.callbacks.gradient_accumulation_scheduler`` module path, imported as
``stoker.callbacks.gradient_accumulation_scheduler``:
the module ``stoker.callbacks.accumulation_scheduler`` (``GradientAccumulationScheduler``) under a second name.

An alias rather than a re-export, as ``model_checkpoint.py`` explains: what a script patches by this name reaches
the module the callback runs in.
"""

import sys

from stoker.callbacks import accumulation_scheduler

sys.modules[__name__] = accumulation_scheduler
