"""Lightning's ``pytorch_lightning.callbacks.throughput_monitor`` module path, imported as
``stoker.callbacks.throughput_monitor``:
the module ``stoker.callbacks.throughput`` (``ThroughputMonitor``) under a second name.

An alias rather than a re-export, as ``model_checkpoint.py`` explains: what a script patches by this name reaches
the module the callback runs in.
"""

import sys

from stoker.callbacks import throughput

sys.modules[__name__] = throughput
