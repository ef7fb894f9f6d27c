"""Lightning's ``pytorch_lightning.loggers.csv_logs`` module path, imported as ``stoker.loggers.csv_logs``: the very
module ``stoker.loggers.csv`` (``CSVLogger`` and its ``ExperimentWriter``) under a second name, so that what a script
patches by this name reaches the module the logger runs in."""

import sys

from stoker.loggers import csv

sys.modules[__name__] = csv
