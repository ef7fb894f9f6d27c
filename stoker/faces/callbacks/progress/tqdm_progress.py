"""Lightning's ``pytorch_lightning.callbacks.progress.tqdm_progress`` module path, imported as
``stoker.callbacks.progress.tqdm_progress``: the very module ``stoker.callbacks.progress_tqdm`` under a second name.

An alias rather than a re-export, so that replacing ``Tqdm`` by this name (as Lightning's tests and some scripts do)
changes the class the bars are made of.
"""

import sys

from stoker.callbacks import progress_tqdm

sys.modules[__name__] = progress_tqdm
