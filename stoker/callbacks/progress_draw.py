"""One progress bar on screen, and the rules around the bars that ``ProgressBar`` (``progress.py``) applies: totals,
the values shown beside the count (``v_num`` among them), Lightning's refresh-rate environment, the bar properties.

A bar is always a tqdm object (made by the callback's ``init_*_tqdm`` factories, so a subclass chooses its look), and
it is what a user reads as ``train_progress_bar`` and the like. On a terminal that object draws itself; elsewhere it
draws into a sink and only counts, while this module prints plain lines (one per finished bar, one per
``line_interval`` seconds in between) so that log files hold no carriage returns.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Mapping
from typing import IO, TYPE_CHECKING, Any, Protocol

import torch

if TYPE_CHECKING:
    from tqdm import tqdm

    from stoker.callbacks.base import TrainerView
    from stoker.callbacks.progress_tqdm import Tqdm
    from stoker.loggers.base import Logger

__all__ = ["DISCARD", "DrawnBar", "bar_property", "bar_total", "batches_per_refresh", "epoch_total", "format_value",
           "logger_version", "prepare", "run_ends_mid_epoch", "shown_already", "shown_values", "tqdm_class"]


class _Discard:
    """Where a bar's tqdm object draws when the output is not a terminal: nowhere."""

    encoding = "utf-8"

    def write(self, text: str) -> int:
        return len(text)

    def flush(self) -> None:
        pass


DISCARD = _Discard()


def format_value(value: Any) -> str:
    """A shown value as text for a plain progress line."""
    if isinstance(value, torch.Tensor):
        value = value.detach().item() if value.numel() == 1 else value
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _format_seconds(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def bar_total(value: Any) -> int | None:
    """A bar total from a batch count: ``None`` for unknown, infinite or NaN lengths (tqdm has no such totals)."""
    if value is None or (isinstance(value, float) and (math.isinf(value) or math.isnan(value))):
        return None
    return int(value)


def epoch_total(trainer: TrainerView, done: int) -> int | float | None:
    """Batches this epoch will run: its length, or fewer when ``max_steps`` ends the run inside it."""
    total = bar_total(trainer.num_training_batches)
    max_steps = trainer.max_steps
    if max_steps is None or max_steps < 0:
        return total
    # Windows start at the epoch's first batch, so from a step boundary each remaining step takes `accumulate`
    # batches (an fp16 step skipped for overflow takes more: the bar is then made full when the run ends).
    by_steps = done + max(0, max_steps - trainer.global_step) * trainer.accumulate
    return by_steps if total is None else min(total, by_steps)


def run_ends_mid_epoch(trainer: TrainerView, bar: DrawnBar) -> bool:
    """Whether the run stops with this epoch unfinished (``max_steps``, ``should_stop``, a `Timer`)."""
    max_steps = trainer.max_steps
    stopping = trainer.should_stop or (max_steps is not None and 0 <= max_steps <= trainer.global_step)
    return stopping and (bar.total is None or bar.n != bar.total)


def shown_already(loss: Any, values: Any) -> bool:
    """Whether ``loss`` is already among the bar's logged values (``self.log("train/loss", loss, prog_bar=True)``):
    the same tensor data (``self.log`` keeps a detached view), or the same number."""
    for value in values:
        if isinstance(loss, torch.Tensor):
            if isinstance(value, torch.Tensor) and value.data_ptr() == loss.data_ptr() and value.numel() == 1 \
                    and value.dtype == loss.dtype and value.device == loss.device:
                return True
        elif not isinstance(value, torch.Tensor) and value == loss:
            return True
        if isinstance(loss, torch.Tensor) and loss.numel() == 1 and isinstance(value, float) and value == loss.item():
            return True  # progress_bar_metrics holds numbers: the same value (read at a redraw only)
    return False


def shown_values(outputs: Any, metrics: Mapping[str, Any]) -> dict[str, Any]:
    """What a bar shows beside its count: the loss in ``outputs`` (a step's return; None for none) unless already
    among ``metrics``, then the metrics; one-element tensors as numbers (read from the device now), so that tqdm
    formats them."""
    shown: dict[str, Any] = {}
    loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
    if isinstance(loss, (torch.Tensor, float, int)) and not shown_already(loss, metrics.values()):
        shown["loss"] = loss
    shown.update(metrics)
    return {k: v.detach().item() if isinstance(v, torch.Tensor) and v.numel() == 1 else v for k, v in shown.items()}


def logger_version(loggers: list[Logger]) -> int | str | None:
    """The run's version as a bar shows it (``v_num``): the logger's, several loggers' joined with ``_``, a text
    version's last four characters; None without a logger or a version."""
    if not loggers:
        return None
    versions = [getattr(logger, "version", None) for logger in loggers]
    version = versions[0] if len(versions) == 1 else "_".join(dict.fromkeys(str(v) for v in versions))
    if version is None or version == "":
        return None
    return version[-4:] if isinstance(version, str) else version


def tqdm_class() -> type[Tqdm]:
    """`Tqdm`, looked up at each call: a replacement put into `progress_tqdm` is what the factories make."""
    from stoker.callbacks import progress_tqdm  # lazy: tqdm loads with the first bar, not with `import stoker`

    return progress_tqdm.Tqdm


class _WithBars(Protocol):
    bars: dict[str, Tqdm | None]  # a ProgressBar's tqdm objects by name ("train", "val", "test", "predict")


def bar_property(name: str, doc: str) -> property:
    """``<name>_progress_bar``: the tqdm object of that bar (readable once the bar was made; a subclass may set it)."""
    def get(self: _WithBars) -> Tqdm:
        bar = self.bars[name]
        if bar is None:
            raise RuntimeError(f"{type(self).__name__}.{name}_progress_bar is made when that bar starts; "
                               "read it from a hook or after the run.")
        return bar

    def set_(self: _WithBars, bar: Tqdm) -> None:
        self.bars[name] = bar

    return property(get, set_, doc=doc)


def batches_per_refresh(refresh_rate: int) -> int:
    """Lightning's environment rules: in Colab (``COLAB_GPU``) a rate of 1 becomes 20, which its output keeps up
    with; ``TQDM_MINITERS`` is a floor on the rate (and turns on a bar given 0)."""
    if os.environ.get("COLAB_GPU") and refresh_rate == 1:
        return 20
    floor = os.environ.get("TQDM_MINITERS")
    if floor is not None:
        try:
            return max(int(floor), refresh_rate)
        except ValueError:
            raise ValueError(f"TQDM_MINITERS={floor!r} must be a whole number of batches.") from None
    return refresh_rate


def prepare(bar: tqdm, label: str, total: int | None, initial: int = 0) -> None:
    """Readies ``bar`` for a new count (one tqdm object may serve several epochs): title, reset, total."""
    bar.set_description(label, refresh=False)  # first: the reset redraws the bar, with the new epoch's title then
    bar.reset()
    bar.total = total
    bar.initial = initial
    if initial:
        bar.update(initial)


class DrawnBar:
    """One bar of a run: its tqdm object, the batches counted since the last redraw, and plain lines off a terminal.

    Args:
        bar: The tqdm object (reset here to ``total`` and ``label``: one object may serve several epochs).
        label: What the bar is titled ("Epoch 3", "Validation").
        total: Batches the bar will count, or None when unknown.
        tty: Whether ``bar`` draws on a terminal; otherwise plain lines go to ``file``.
        file: Where plain lines go.
        line_interval: Seconds between plain lines while the bar runs.
        initial: Batches already done (a resumed epoch).
    """

    def __init__(self, bar: tqdm, label: str, total: int | None, tty: bool, file: IO[str], line_interval: float,
                 initial: int = 0) -> None:
        self.tqdm, self.label, self.total, self.tty = bar, label, total, tty
        self.file, self.line_interval = file, line_interval
        self.n = self.initial = initial
        self.values: Mapping[str, Any] = {}  # the shown values of the last redraw, for the plain lines
        self.start = self.last_line = time.monotonic()
        prepare(bar, label, total, initial)

    def end_here(self) -> None:
        """The run ends with this bar: its total becomes what was done, so it shows 100% and no time left."""
        self.total = self.tqdm.total = self.n

    def show(self, postfix: Mapping[str, Any] | None, now: float, count: bool = True) -> None:
        """Brings the tqdm object up to the count (unless not ``count``), with new shown values unless ``postfix``
        is None."""
        bar = self.tqdm
        if postfix is not None:
            self.values = postfix
            bar.set_postfix(postfix, refresh=self.tty and not count)
        if count and not bar.disable:
            if self.n != bar.n:
                bar.update(self.n - bar.n)
            if self.tty and bar.last_print_n != bar.n:
                bar.refresh()  # update() draws only after tqdm's own mininterval; the callback has decided already
        if not self.tty and now - self.last_line >= self.line_interval:
            self._line(now)

    def finish(self, postfix: Mapping[str, Any] | None, close: bool) -> None:
        """The bar's last count and values (a plain line off a terminal); ``close`` ends the tqdm object too."""
        self.show(postfix, time.monotonic())
        if not self.tty:
            self._line(time.monotonic())
        if close:
            self.tqdm.close()

    def _line(self, now: float) -> None:
        self.last_line = now
        elapsed = now - self.start
        speed = (self.n - self.initial) / elapsed if elapsed > 0 else 0.0
        rate = f"{speed:.2f}it/s" if elapsed > 0 else "?it/s"
        count = f"{self.n}/{self.total}" if self.total is not None else str(self.n)
        # The time left in this bar at the rate so far (tqdm's "elapsed<left"); unknown without a total or a rate.
        left = "" if self.total is None else "<" + ("?" if speed <= 0 and self.n < self.total else
                                                     _format_seconds(max(0, self.total - self.n) / (speed or 1.0)))
        extras = ", ".join(f"{k}={format_value(v)}" for k, v in self.values.items())
        print(f"{self.label}: {count} [{_format_seconds(elapsed)}{left}, {rate}]" +
              (f" {extras}" if extras else ""), file=self.file, flush=True)
