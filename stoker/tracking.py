"""``from stoker.tracking import GeneralTracker`` (Accelerate's ``accelerate.tracking``); a face over
``stoker/compat/accelerate/tracking.py``."""

from .compat.accelerate.tracking import (GeneralTracker, MLflowTracker, TensorBoardTracker, WandBTracker,
                                         get_available_trackers, on_main_process)

__all__ = ["GeneralTracker", "MLflowTracker", "TensorBoardTracker", "WandBTracker", "get_available_trackers",
           "on_main_process"]
