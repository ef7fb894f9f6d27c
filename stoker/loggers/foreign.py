"""Loggers that are not stoker's: any object with the methods a Trainer calls (a Lightning logger, a test double).

Owns the rule of what counts as a logger for ``Trainer(logger=...)`` and the two questions the Trainer asks of its
loggers list about folders: which loggers own a run folder, and the run's log folder. A foreign logger is only
called; the folders and versions of a run come from its stoker loggers (``base.Logger``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from stoker.loggers.base import Logger

__all__ = ["LOGGER_METHODS", "check_foreign_logger", "first_log_dir", "is_foreign_logger", "owns_folder"]

# What the Trainer and its callbacks call on a logger during a run. An object that is not a stoker `Logger` but has
# all of them (a Lightning logger, a test double) is accepted as a logger: it is called, never asked for folders.
LOGGER_METHODS = ("log_metrics", "log_hyperparams", "log_graph", "save", "after_save_checkpoint", "finalize")


def is_foreign_logger(obj: Any) -> bool:
    """True for an object that is not a stoker `Logger` but can stand in for one (see ``LOGGER_METHODS``)."""
    return not isinstance(obj, (Logger, type)) and all(callable(getattr(obj, m, None)) for m in LOGGER_METHODS)


def owns_folder(logger: Any) -> bool:
    """Whether ``logger`` is a stoker `Logger`: one with a run folder and a version the Trainer may ask for (a foreign
    logger is only called)."""
    return isinstance(logger, Logger)


def first_log_dir(loggers: Iterable[Any]) -> str | None:
    """The ``log_dir`` of the first stoker `Logger` among ``loggers`` (the run's log folder), or None."""
    return next((lg.log_dir for lg in loggers if owns_folder(lg)), None)


def check_foreign_logger(obj: Any, argument: str) -> None:
    """Raises TypeError, naming ``argument`` and what is missing, when ``obj`` cannot be used as a logger."""
    if is_foreign_logger(obj):
        return
    expected = (f"{argument}: expected True, False, a logger name such as 'csv' or 'tensorboard', a logger, or a list "
                "of these")
    if isinstance(obj, type):
        raise TypeError(f"{expected}; {obj.__name__} is a class: pass an instance of it, e.g. {obj.__name__}(...).")
    missing = [m for m in LOGGER_METHODS if not callable(getattr(obj, m, None))]
    raise TypeError(f"{expected}; {type(obj).__name__} is none of them (a logger has the methods "
                    f"{', '.join(LOGGER_METHODS)}; it lacks {', '.join(missing)}). Subclass stoker.loggers.Logger, "
                    "whose defaults do nothing, and override what you need.")
