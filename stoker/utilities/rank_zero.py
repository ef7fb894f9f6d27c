"""Run a function, or emit a message, on the global-zero process only (Lightning's ``rank_zero_only`` and friends).

The rank is read when the function is called: the process group's rank when one exists, else the launcher's
environment (``RANK``, then ``LOCAL_RANK``, ``SLURM_PROCID``, ``JSM_NAMESPACE_RANK``), else 0; it is readable as
``rank_zero_only.rank``. Setting ``rank_zero_only.rank = n`` fixes it instead (``None`` reads it again).

Example:
    >>> from stoker.utilities import rank_zero_only
    >>> @rank_zero_only
    ... def report(text):
    ...     return text
    >>> report("on the global-zero process only")
    'on the global-zero process only'
"""

from __future__ import annotations

import functools
import logging
import os
import warnings
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

log = logging.getLogger("stoker")
_ENV_KEYS = ("RANK", "LOCAL_RANK", "SLURM_PROCID", "JSM_NAMESPACE_RANK")


class _RankZeroOnly:
    """The ``rank_zero_only`` decorator; its ``rank`` attribute is the rank it compares with 0."""

    def __init__(self) -> None:
        self._fixed: int | None = None

    @property
    def rank(self) -> int:
        if self._fixed is not None:
            return self._fixed
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank()
        for key in _ENV_KEYS:
            value = os.environ.get(key, "").strip()
            if value.isdigit():
                return int(value)
        return 0

    @rank.setter
    def rank(self, value: int | None) -> None:
        self._fixed = None if value is None else int(value)

    def __call__(self, fn: Callable[..., T], default: Any = None) -> Callable[..., T | Any]:
        """``fn`` wrapped to run on the global-zero process only; elsewhere it returns ``default`` (None)."""

        @functools.wraps(fn)
        def wrapped(*args: Any, **kwargs: Any) -> T | Any:
            return fn(*args, **kwargs) if self.rank == 0 else default

        return wrapped


rank_zero_only = _RankZeroOnly()


def rank_zero_info(message: str, *args: Any, **kwargs: Any) -> None:
    """``logging.info`` on the ``stoker`` logger, on the global-zero process only."""
    if rank_zero_only.rank == 0:
        log.info(message, *args, **kwargs)


def rank_zero_debug(message: str, *args: Any, **kwargs: Any) -> None:
    """``logging.debug`` on the ``stoker`` logger, on the global-zero process only."""
    if rank_zero_only.rank == 0:
        log.debug(message, *args, **kwargs)


def rank_zero_warn(message: str | Warning, category: type[Warning] = UserWarning, stacklevel: int = 4,
                   **kwargs: Any) -> None:
    """``warnings.warn`` on the global-zero process only."""
    if rank_zero_only.rank == 0:
        warnings.warn(message, category, stacklevel=stacklevel, **kwargs)


def rank_zero_deprecation(message: str | Warning, stacklevel: int = 5, **kwargs: Any) -> None:
    """A ``DeprecationWarning`` on the global-zero process only."""
    rank_zero_warn(message, DeprecationWarning, stacklevel=stacklevel, **kwargs)
