"""The constructor checks of `ModelCheckpoint`: a bad option fails at construction, not after the first epoch."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from stoker.callbacks.checkpoint_files import Zeros, format_checkpoint_name

__all__ = ["EVERY_EPOCH", "check_options"]


class _Default(int):
    """An int default that the constructor can tell from the same number passed explicitly."""

    def __repr__(self) -> str:
        return int.__repr__(self)


EVERY_EPOCH = _Default(1)  # every_n_epochs when not given: 1, or 0 with every_n_train_steps


def check_options(**options: Any) -> None:
    """Raises for the first bad constructor option, quoting it: at construction, not after the first epoch."""
    def count(value: Any, low: int) -> bool:
        return not isinstance(value, bool) and isinstance(value, int) and value >= low

    monitor, interval, when = options["monitor"], options["train_time_interval"], options["save_on_train_epoch_end"]
    if monitor is not None and (not isinstance(monitor, str) or not monitor):
        raise TypeError(f"ModelCheckpoint(monitor={monitor!r}) must be a metric name such as 'val/loss', or None.")
    top_k, last = options["save_top_k"], options["save_last"]
    if last not in (None, True, False, "link"):
        raise ValueError(f"ModelCheckpoint(save_last={last!r}) must be True, False, None or 'link'.")
    if monitor is None and count(top_k, 2):
        # Lightning's rule: with no score there is nothing to rank k checkpoints by.
        raise ValueError(f"ModelCheckpoint(save_top_k={top_k}, monitor=None) is not a valid configuration: without a "
                         "monitored metric there is no score to keep the k best by. Pass monitor='...', or "
                         "save_top_k=-1 (keep all), 1 (the newest) or 0.")
    steps, epochs = options["every_n_train_steps"], options["every_n_epochs"]
    off = "is invalid. Must be >= 0, or None (0 or None: off)."
    rules = (
        ("mode", options["mode"] in ("min", "max"), "is not a mode. Expected 'min' or 'max'."),
        ("save_top_k", count(options["save_top_k"], -1), "is invalid. Must be >= -1: -1 (all), 0 (none) or k >= 1."),
        ("every_n_train_steps", steps is None or count(steps, 0), off),
        ("every_n_epochs", epochs is None or count(epochs, 0), off),
        ("save_on_train_epoch_end", when is None or isinstance(when, bool), "must be True, False or None."),
        ("train_time_interval", interval is None or (isinstance(interval, timedelta) and interval.total_seconds() >= 0),
         "must be a datetime.timedelta >= 0, e.g. timedelta(minutes=30) (0: at every check), or None."),
    )
    for name, ok, rule in rules:
        if not ok:
            lightning = f"`mode` can be min, max but got {options['mode']}: " if name == "mode" else ""
            raise ValueError(f"{lightning}ModelCheckpoint({name}={options[name]!r}) {rule}")
    try:  # fail now, not after the first epoch, on a template that cannot be filled
        format_checkpoint_name(options["template"], Zeros(), options["auto_insert_metric_name"])
    except (ValueError, IndexError, KeyError) as error:
        raise ValueError(f"ModelCheckpoint(filename={options['filename']!r}) is not a valid template: {error}") from None
