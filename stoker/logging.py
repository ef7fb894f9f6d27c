"""``from stoker.logging import get_logger`` (Accelerate's ``accelerate.logging``); see ``stoker/utils/logging.py``."""

from .utils.logging import MultiProcessAdapter, get_logger

__all__ = ["MultiProcessAdapter", "get_logger"]
