"""A Trainer for tests that shows and writes nothing it is not asked for.

Example:
    >>> trainer = quiet_trainer(max_epochs=2, accumulate=2)  # no logger, no checkpoints, no progress bar
    >>> trainer = quiet_trainer(logger=CSVLogger(tmp_path))   # any of the three may be asked for
"""

from __future__ import annotations

from typing import Any

from stoker import ProgressBar, Trainer


def asks_for_bar(callbacks: Any) -> bool:
    """Whether ``Trainer(callbacks=...)`` holds a progress bar: then the bar is on (the Trainer refuses a progress bar
    callback with ``enable_progress_bar=False``)."""
    items = callbacks if isinstance(callbacks, (list, tuple)) else [callbacks]
    return any(isinstance(c, ProgressBar) for c in items)


def quiet_trainer(**kwargs: Any) -> Trainer:
    """``Trainer(**kwargs)`` with ``logger=False``, ``enable_checkpointing=False`` and no progress bar unless
    ``kwargs`` says otherwise (a progress bar in ``callbacks`` turns it on)."""
    kwargs.setdefault("logger", False)
    kwargs.setdefault("enable_checkpointing", False)
    kwargs.setdefault("enable_progress_bar", asks_for_bar(kwargs.get("callbacks")))
    return Trainer(**kwargs)
