"""Callbacks: the `Callback` base class and the built-in callbacks.

Each built-in lives in its own module: `ModelCheckpoint` (checkpoint.py), `EarlyStopping`
(early_stopping.py), `LearningRateMonitor` (lr_monitor.py), `ProgressBar` and Lightning's `TQDMProgressBar`
(progress.py), `Timer` (timer.py), `ModelSummary` (summary.py), `BasePredictionWriter` (prediction_writer.py),
`GradientAccumulationScheduler` (accumulation_scheduler.py), `ThroughputMonitor` (throughput.py),
`OnExceptionCheckpoint` (on_exception.py), `StochasticWeightAveraging` (swa.py), `WeightAveraging` /
`EMAWeightAveraging` (weight_averaging.py), `SpikeDetection` and its `TrainingSpikeException` (spike.py),
`LambdaCallback` (lambda_function.py), `DeviceStatsMonitor` (device_stats_monitor.py), `BaseFinetuning` /
`BackboneFinetuning` (finetuning.py), and the rich look of the bar and the table, `RichProgressBar`
(rich_progress.py) and `RichModelSummary` (rich_summary.py). Those after `Timer` are imported on first use. None of
them imports tqdm, rich, tensorboard or torchmetrics at import time.
"""

import os
from importlib import import_module
from typing import TYPE_CHECKING, Any

from stoker.callbacks.base import Callback, Checkpoint
from stoker.callbacks.checkpoint import ModelCheckpoint
from stoker.callbacks.early_stopping import EarlyStopping, EarlyStoppingReason
from stoker.callbacks.lr_monitor import LearningRateMonitor
from stoker.callbacks.progress import ProgressBar, TQDMProgressBar
from stoker.callbacks.timer import Timer

_LAZY = {
    "ModelSummary": "stoker.callbacks.summary",
    # drawn with rich, imported when a bar or table is made (rich is an optional dependency)
    "RichProgressBar": "stoker.callbacks.rich_progress",
    "RichProgressBarTheme": "stoker.callbacks.rich_theme",
    "RichModelSummary": "stoker.callbacks.rich_summary",
    "BasePredictionWriter": "stoker.callbacks.prediction_writer",
    "GradientAccumulationScheduler": "stoker.callbacks.accumulation_scheduler",
    "ThroughputMonitor": "stoker.callbacks.throughput",
    "OnExceptionCheckpoint": "stoker.callbacks.on_exception",
    "StochasticWeightAveraging": "stoker.callbacks.swa",
    "WeightAveraging": "stoker.callbacks.weight_averaging",
    "EMAWeightAveraging": "stoker.callbacks.weight_averaging",
    "SpikeDetection": "stoker.callbacks.spike",
    "TrainingSpikeException": "stoker.callbacks.spike",
    "LambdaCallback": "stoker.callbacks.lambda_function",
    "DeviceStatsMonitor": "stoker.callbacks.device_stats_monitor",
    "ModelPruning": "stoker.callbacks.pruning",
    "BaseFinetuning": "stoker.callbacks.finetuning",
    "BackboneFinetuning": "stoker.callbacks.finetuning",
    # the tuner's searches run by a run (they use the Trainer, above this package: imported on first use only)
    "LearningRateFinder": "stoker.tuner.finders",
    "BatchSizeFinder": "stoker.tuner.finders",
}

# Lightning's module paths under this package (stoker.callbacks.model_checkpoint) are faces kept in
# stoker/faces/callbacks/, found through this __path__ entry: the core itself imports nothing from them.
__path__.append(os.path.join(os.path.dirname(os.path.dirname(__file__)), "faces", "callbacks"))


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'stoker.callbacks' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


__all__ = ["Callback", "Checkpoint", "EarlyStopping", "EarlyStoppingReason", "LearningRateMonitor", "ModelCheckpoint", "ProgressBar",
           "TQDMProgressBar", "Timer", *_LAZY]


if TYPE_CHECKING:  # type checkers and the docs' API reference cannot see PEP 562 lazy names: `X as X` re-exports
    from stoker.callbacks.accumulation_scheduler import GradientAccumulationScheduler as GradientAccumulationScheduler
    from stoker.callbacks.device_stats_monitor import DeviceStatsMonitor as DeviceStatsMonitor
    from stoker.callbacks.finetuning import BackboneFinetuning as BackboneFinetuning
    from stoker.callbacks.finetuning import BaseFinetuning as BaseFinetuning
    from stoker.callbacks.lambda_function import LambdaCallback as LambdaCallback
    from stoker.callbacks.pruning import ModelPruning as ModelPruning
    from stoker.callbacks.on_exception import OnExceptionCheckpoint as OnExceptionCheckpoint
    from stoker.callbacks.prediction_writer import BasePredictionWriter as BasePredictionWriter
    from stoker.callbacks.rich_progress import RichProgressBar as RichProgressBar
    from stoker.callbacks.rich_theme import RichProgressBarTheme as RichProgressBarTheme
    from stoker.callbacks.rich_summary import RichModelSummary as RichModelSummary
    from stoker.callbacks.spike import SpikeDetection as SpikeDetection
    from stoker.callbacks.spike import TrainingSpikeException as TrainingSpikeException
    from stoker.callbacks.summary import ModelSummary as ModelSummary
    from stoker.callbacks.swa import StochasticWeightAveraging as StochasticWeightAveraging
    from stoker.callbacks.throughput import ThroughputMonitor as ThroughputMonitor
    from stoker.callbacks.weight_averaging import EMAWeightAveraging as EMAWeightAveraging
    from stoker.callbacks.weight_averaging import WeightAveraging as WeightAveraging
