"""``from stoker.tracking import GeneralTracker`` (Accelerate's ``accelerate.tracking``); a face over
``stoker/compat/accelerate/tracking.py``."""

from .compat.accelerate.tracking import (CometMLTracker, GeneralTracker, MLflowTracker, TensorBoardTracker,
                                         WandBTracker, get_available_trackers, on_main_process)

__all__ = ["CometMLTracker", "GeneralTracker", "MLflowTracker", "TensorBoardTracker", "WandBTracker",
           "get_available_trackers", "on_main_process"]
