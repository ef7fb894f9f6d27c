"""``get_logger``: a ``logging`` logger that, in several processes, logs on the main process only (Accelerate's
``accelerate.logging.get_logger``; also ``stoker.logging.get_logger``).

Which process this is comes from torch's default process group (or the launcher's ``RANK``), not from any
stoker object, so a logger can be made at import time, before the Accelerator.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any


class MultiProcessAdapter(logging.LoggerAdapter):
    """A ``LoggerAdapter`` whose calls take ``main_process_only=True`` (log on process 0 only) and
    ``in_order=False`` (with ``main_process_only=False``: every process logs, one after the other)."""

    def log(self, level: int, msg: object, *args: Any, **kwargs: Any) -> None:
        main_process_only = kwargs.pop("main_process_only", True)
        in_order = kwargs.pop("in_order", False)
        kwargs.setdefault("stacklevel", 2)
        if not self.isEnabledFor(level):
            return
        rank, world = _process()
        if main_process_only and rank != 0:
            return
        msg, kwargs = self.process(msg, kwargs)
        if not (in_order and not main_process_only and world > 1):
            self.logger.log(level, msg, *args, **kwargs)
            return
        import torch.distributed as dist

        for turn in range(world):  # every process takes its turn; all must make this call
            if turn == rank:
                self.logger.log(level, msg, *args, **kwargs)
            dist.barrier()

    @functools.lru_cache(None)  # noqa: B019 - one entry per distinct message, as intended
    def warning_once(self, *args: Any, **kwargs: Any) -> None:
        """Logs a warning only the first time it is called with these arguments."""
        self.warning(*args, **kwargs)


def _process() -> tuple[int, int]:
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    return int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))


def get_logger(name: str, log_level: str | None = None) -> MultiProcessAdapter:
    """The logger ``name`` wrapped so that it logs on the main process only (unless a call says otherwise).

    Args:
        name: The logger's name, usually ``__name__``.
        log_level: A level name for this logger and the root logger; default: ``$ACCELERATE_LOG_LEVEL`` if set.

    Example:
        >>> logger = get_logger(__name__, log_level="INFO")
        >>> logger.info("starting")                                   # process 0 only
        >>> logger.info("hello", main_process_only=False, in_order=True)  # every process, in order
    """
    log_level = log_level or os.environ.get("ACCELERATE_LOG_LEVEL")
    logger = logging.getLogger(name)
    if log_level is not None:
        logger.setLevel(log_level.upper())
        logger.root.setLevel(log_level.upper())
    return MultiProcessAdapter(logger, {})
