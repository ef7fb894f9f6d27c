"""Where a warning for the user should point: the user's line that led to it, not stoker's own; and the category of
the warnings about a setting that may well be intended (`PossibleUserWarning`).

A warning raised inside a run (a callback's hook, the loop, set-up) is many stoker frames away from the user's
``trainer.fit(...)``; a fixed ``stacklevel`` breaks whenever the call path changes (a hook through the dispatcher,
a stage through a context manager). :func:`user_stacklevel` counts the frames instead. Imports nothing of stoker, so
every layer may use it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from types import FrameType

__all__ = ["PossibleUserWarning", "silence_possible_user_warnings", "user_stacklevel"]


class PossibleUserWarning(UserWarning):
    """A warning about a setting that may be what the user wants (few loader workers, a logging interval longer
    than an epoch, a ``validation_step`` without val loaders): silence these alone with
    ``warnings.filterwarnings("ignore", category=PossibleUserWarning)``. Lightning's class of the same name and use
    (``stoker.utilities.warnings``)."""


def silence_possible_user_warnings(environ: Mapping[str, str] = os.environ) -> bool:
    """With ``POSSIBLE_USER_WARNINGS=0`` or ``off`` in ``environ`` (Lightning's variable), ignores every
    `PossibleUserWarning`; ``import stoker`` calls it. Returns whether it did."""
    if environ.get("POSSIBLE_USER_WARNINGS", "").strip().lower() not in ("0", "off"):
        return False
    import warnings

    warnings.filterwarnings("ignore", category=PossibleUserWarning)
    return True

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep
_PASS_THROUGH = ("contextlib.py", "functools.py")  # the stdlib frames between stoker's own (with-blocks, partials)


def _outside(filename: str) -> bool:
    return not filename.startswith(_PACKAGE) and not filename.endswith(_PASS_THROUGH)


def user_stacklevel() -> int:
    """The ``stacklevel`` for a ``warnings.warn`` in the caller that points at the first frame outside stoker.

    Example:
        >>> warnings.warn("the folder holds an earlier run", UserWarning, stacklevel=user_stacklevel())
    """
    frame: FrameType | None = sys._getframe(1)  # the function that will call warnings.warn: stacklevel 1
    level = 1
    while frame is not None and not _outside(os.path.abspath(frame.f_code.co_filename)):
        frame = frame.f_back
        level += 1
    return level if frame is not None else 2
