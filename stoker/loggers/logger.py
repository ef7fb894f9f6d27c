"""Lightning's ``loggers.logger`` module path: the `Logger` base and `DummyLogger`, the logger that records nothing
(what ``trainer.logger`` is in a ``fast_dev_run`` that was given a logger, so that a module's
``self.logger.experiment.add_histogram(...)`` still runs while nothing is written)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from stoker.loggers.base import Logger

__all__ = ["DummyLogger", "Logger"]


class _NoExperiment:
    """Answers every method call with None, so code written for a backend's experiment object runs unchanged."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None

    def __getitem__(self, index: Any) -> _NoExperiment:
        return self  # Lightning's experiment may be indexed as a list (one per logger)


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
    def experiment(self) -> _NoExperiment:
        return _NoExperiment()

    @property
    def version_dir(self) -> str:
        return self.save_dir

    def log_metrics(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        """Records nothing."""
