"""Lightning's ``pytorch_lightning.callbacks.progress.rich_progress`` module path, imported as
``stoker.callbacks.progress.rich_progress``: the very module ``stoker.callbacks.rich_progress`` under a second name
(``RichProgressBar``, ``RichProgressBarTheme``). Importing it does not import rich.
"""

import sys

from stoker.callbacks import rich_progress

sys.modules[__name__] = rich_progress
