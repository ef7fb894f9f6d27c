"""Experiment loggers: where `self.log`, `Accelerator.log` and callbacks send numbers.

`build_loggers` turns the user-facing spec (``log_with=`` / ``logger=``) into a
plain list of `Logger` objects. Loggers are called on the main process only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from stoker.loggers.base import Logger
from stoker.loggers.csv import CSVLogger
from stoker.loggers.tensorboard import TensorBoardLogger

__all__ = ["CSVLogger", "Logger", "TensorBoardLogger", "build_loggers"]

_BY_NAME: dict[str, type[Logger]] = {"tensorboard": TensorBoardLogger, "csv": CSVLogger}

LoggerSpec = str | Logger | None | Sequence[str | Logger]


def build_loggers(
    spec: LoggerSpec,
    save_dir: str | os.PathLike,
    name: str = "stoker_logs",
) -> list[Logger]:
    """Turn a logger spec into a list of loggers.

    Args:
        spec: ``None`` (no loggers), ``"tensorboard"`` or ``"csv"`` (any case),
            a `Logger` instance, or a list/tuple of these.
        save_dir: ``save_dir`` for loggers built from strings.
        name: ``name`` for loggers built from strings.

    Returns:
        The loggers, in the order given. Logger instances are returned as-is.
        Loggers built from strings in one call share one version folder, so
        ``["tensorboard", "csv"]`` writes both into the same ``version_{n}``.

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
    leader: Logger | None = None
    seen: set[str] = set()
    for item in items:
        if isinstance(item, Logger):
            loggers.append(item)
            continue
        key = item.lower() if isinstance(item, str) else None
        if key not in _BY_NAME:
            raise ValueError(
                f"log_with={item!r} is not a supported logger. Expected one of: "
                + ", ".join(repr(n) for n in _BY_NAME)
                + ", a stoker Logger instance, or a list of these."
            )
        if key in seen:
            raise ValueError(f"log_with lists {key!r} twice; each logger type may appear once.")
        seen.add(key)
        logger = _BY_NAME[key](save_dir, name=name)
        # The first string-built logger picks the version lazily; the rest follow it.
        if leader is None:
            leader = logger
        else:
            logger._version_leader = leader
        loggers.append(logger)
    return loggers
