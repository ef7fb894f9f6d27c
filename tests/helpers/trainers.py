"""A Trainer for tests that shows and writes nothing it is not asked for.

Example:
    >>> trainer = quiet_trainer(max_epochs=2, accumulate=2)  # no logger, no checkpoints, no progress bar
    >>> trainer = quiet_trainer(logger=CSVLogger(tmp_path))   # any of the three may be asked for
"""

from __future__ import annotations

from typing import Any

from stoker import Trainer


def quiet_trainer(**kwargs: Any) -> Trainer:
    """``Trainer(**kwargs)`` with ``logger=False``, ``enable_checkpointing=False`` and ``enable_progress_bar=False``
    unless ``kwargs`` says otherwise."""
    kwargs.setdefault("logger", False)
    kwargs.setdefault("enable_checkpointing", False)
    kwargs.setdefault("enable_progress_bar", False)
    return Trainer(**kwargs)
