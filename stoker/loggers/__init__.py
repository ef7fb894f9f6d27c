"""Experiment loggers: where `self.log`, `Accelerator.log` and callbacks send numbers.

`build_loggers` turns the user-facing spec (``log_with=`` / ``logger=``) into a
plain list of `Logger` objects. Loggers are called on the main process only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from stoker.loggers.base import Logger, share_version
from stoker.loggers.csv import CSVLogger
from stoker.loggers.tensorboard import TensorBoardLogger

__all__ = ["CSVLogger", "Logger", "TensorBoardLogger", "build_loggers"]

_BY_NAME: dict[str, type[Logger]] = {"tensorboard": TensorBoardLogger, "csv": CSVLogger}

LoggerSpec = str | Logger | None | Sequence[str | Logger]


def logger_from_name(spec: str, save_dir: str | os.PathLike, name: str, argument: str = "log_with") -> Logger:
    """The logger registered under ``spec`` (any case), built under ``save_dir``/``name``.

    The one place where a logger name becomes a logger: ``log_with=`` and ``Trainer(logger=...)`` both come here.

    Raises:
        ValueError: ``spec`` is not a registered name (the message lists the names).
    """
    key = spec.lower() if isinstance(spec, str) else None
    if key not in _BY_NAME:
        raise ValueError(
            f"{argument}={spec!r} is not a supported logger. Expected one of: "
            + ", ".join(repr(n) for n in _BY_NAME)
            + ", a stoker Logger instance, or a list of these."
        )
    return _BY_NAME[key](save_dir, name=name)


def build_loggers(
    spec: LoggerSpec,
    save_dir: str | os.PathLike,
    name: str = "stoker_logs",
    argument: str = "log_with",
) -> list[Logger]:
    """Turn a logger spec into a list of loggers.

    Args:
        spec: ``None`` (no loggers), ``"tensorboard"`` or ``"csv"`` (any case),
            a `Logger` instance, or a list/tuple of these.
        save_dir: ``save_dir`` for loggers built from strings.
        name: ``name`` for loggers built from strings.
        argument: How the caller's argument is named in error messages.

    Returns:
        The loggers, in the order given. Logger instances are returned as-is.
        The loggers of one call that have no version yet (all those built from
        strings, and instances constructed without ``version``) share one
        version number, so ``["tensorboard", "csv"]`` writes both into the same
        ``version_{n}``.

    Raises:
        ValueError: An entry is not a supported name or a `Logger`, or a name
            is given twice.

    Example:
        >>> [type(x).__name__ for x in build_loggers(["TensorBoard", "csv"], "runs")]
        ['TensorBoardLogger', 'CSVLogger']
    """
    if spec is None:
        return []
    items = list(spec) if isinstance(spec, (list, tuple)) else [spec]
    loggers: list[Logger] = []
    seen: set[str] = set()
    for item in items:
        if isinstance(item, Logger):
            loggers.append(item)
            continue
        logger = logger_from_name(item, save_dir, name, argument)
        key = item.lower()
        if key in seen:
            raise ValueError(f"{argument} lists {key!r} twice; each logger type may appear once.")
        seen.add(key)
        loggers.append(logger)
    share_version(loggers)
    return loggers
