"""``from stoker.logging import get_logger`` (Accelerate's ``accelerate.logging``); a face over
``stoker/compat/accelerate/logging.py``."""

from .compat.accelerate.logging import MultiProcessAdapter, get_logger

__all__ = ["MultiProcessAdapter", "get_logger"]
