"""Callbacks: the `Callback` base class and the built-in callbacks.

Each built-in lives in its own module: `ModelCheckpoint` (checkpoint.py), `EarlyStopping`
(early_stopping.py), `LearningRateMonitor` (lr_monitor.py), `ProgressBar` (progress.py) and
`Timer` (timer.py). None of them imports tqdm, tensorboard or torchmetrics at import time.
"""

from stoker.callbacks.base import Callback
from stoker.callbacks.checkpoint import ModelCheckpoint
from stoker.callbacks.early_stopping import EarlyStopping
from stoker.callbacks.lr_monitor import LearningRateMonitor
from stoker.callbacks.progress import ProgressBar
from stoker.callbacks.timer import Timer

__all__ = ["Callback", "EarlyStopping", "LearningRateMonitor", "ModelCheckpoint", "ProgressBar", "Timer"]
