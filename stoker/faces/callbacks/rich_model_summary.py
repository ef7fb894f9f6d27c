"""Lightning's ``pytorch_lightning.callbacks.rich_model_summary`` module path, imported as
``stoker.callbacks.rich_model_summary``: the module ``stoker.callbacks.rich_summary`` (``RichModelSummary``) under a
second name. Importing it does not import rich.
"""

import sys

from stoker.callbacks import rich_summary

sys.modules[__name__] = rich_summary
