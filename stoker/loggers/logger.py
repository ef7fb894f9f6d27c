"""Lightning's ``loggers.logger`` module path: the `Logger` base and `DummyLogger`, the logger that records nothing
(what ``trainer.logger`` is in a ``fast_dev_run`` that was given a logger, so that a module's
``self.logger.experiment.add_histogram(...)`` still runs while nothing is written)."""

from __future__ import annotations

import os
from typing import Any

from stoker.loggers.base import DummyExperiment, Logger

__all__ = ["DummyExperiment", "DummyLogger", "Logger"]


class DummyLogger(Logger):
    """A logger that writes nothing; its folder is ``save_dir`` itself (no name or version sub-folders).

    Example:
        >>> logger = DummyLogger()
        >>> logger.experiment.add_scalar("loss", 0.5)  # accepted, ignored
        >>> logger.log_metrics({"loss": 0.5}, step=0)
    """

    def __init__(self, save_dir: str | os.PathLike = ".") -> None:
        super().__init__(save_dir=save_dir, name="", version="")

    @property
    def experiment(self) -> DummyExperiment:
        return DummyExperiment()

    @property
    def version_dir(self) -> str:
        return self.save_dir

    def log_metrics(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """Records nothing (any arguments)."""

    def log_hyperparams(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[override]
        """Records nothing (any arguments)."""

    def __getattr__(self, name: str) -> Any:
        """A backend logger's own methods (``log_text``, ``log_image``, ...) are accepted and do nothing."""
        if name.startswith("_"):  # private and special names stay unknown (copy, pickle, hasattr checks)
            raise AttributeError(name)
        return lambda *args, **kwargs: None
