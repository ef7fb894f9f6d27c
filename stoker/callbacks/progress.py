"""`ProgressBar`: tqdm bars for training, validation, test and predict, redrawn on a time interval.

This module owns what a user sees while a run is going: one bar per training epoch (batches, rate,
the latest loss and every ``prog_bar`` metric) and one bar per evaluation run. It does not own the
metric values (the Trainer's ``progress_bar_metrics``).

Cost: per batch, an integer increment, a reference to the outputs and one ``time.monotonic()``; the
loss and metrics are read from the device (``.item()``) only when the bar is redrawn, at most once
every ``refresh_rate`` seconds. When the output is not a terminal (a log file, CI) there are no
carriage-return redraws at all: one plain line is printed per finished bar, plus at most one line
per ``line_interval`` seconds during long epochs, each with the rate and the time left. tqdm is imported only
when a terminal bar is drawn; while one is on screen, stdout goes through it (``progress_io.py``), so that prints
do not garble it.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Mapping
from typing import IO, Any

import torch

from stoker.callbacks.base import Callback, TrainerView, evaluation_hooks
from stoker.callbacks.progress_io import StdoutThroughBar

__all__ = ["ProgressBar"]

_EVAL_BARS = {"validate": ("Validation", "num_val_batches"), "test": ("Testing", "num_test_batches"),
              "predict": ("Predicting", "num_predict_batches")}  # a bar's title, and the batch counts' attribute


def _format_value(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        value = value.detach().item() if value.numel() == 1 else value
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _format_seconds(seconds: float) -> str:
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes:02d}:{secs:02d}"


def _total(value: Any) -> int | None:
    """A bar total from a batch count: ``None`` for unknown or infinite lengths."""
    if value is None or (isinstance(value, float) and math.isinf(value)):
        return None
    return int(value)


def _epoch_total(trainer: TrainerView, done: int) -> int | float | None:
    """Batches this epoch will run: its length, or fewer when ``max_steps`` ends the run inside it."""
    total = _total(trainer.num_training_batches)
    max_steps = trainer.max_steps
    if max_steps is None:
        return total
    # Windows start at the epoch's first batch, so from a step boundary each remaining step takes `accumulate`
    # batches (an fp16 step skipped for overflow takes more: the bar is then made full when the run ends).
    by_steps = done + max(0, max_steps - trainer.global_step) * trainer.accumulate
    return by_steps if total is None else min(total, by_steps)


def _run_ends_mid_epoch(trainer: TrainerView, bar: _Bar) -> bool:
    """Whether the run stops with this epoch unfinished (``max_steps``, ``should_stop``, a `Timer`)."""
    max_steps = trainer.max_steps
    stopping = trainer.should_stop or (max_steps is not None and trainer.global_step >= max_steps)
    return stopping and (bar.total is None or bar.n != bar.total)


def _logged(loss: Any, values: Any) -> bool:
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


class _Bar:
    """One bar: a tqdm bar on a terminal, plain lines otherwise."""

    def __init__(self, desc: str, total: int | None, file: IO[str], tty: bool, leave: bool,
                 line_interval: float, initial: int = 0) -> None:
        self.desc, self.total, self.file, self.line_interval = desc, total, file, line_interval
        self.n = self.initial = initial  # a resumed epoch starts at the batches it had done
        self.start = self.last_line = time.monotonic()
        self.tqdm: Any = None
        if tty:
            from tqdm import tqdm  # lazy: `import stoker` must not import tqdm

            # mininterval=0: the callback already limits redraws, every update() we make should draw.
            self.tqdm = tqdm(total=total, desc=desc, file=file, leave=leave, dynamic_ncols=True,
                             mininterval=0, miniters=1, unit="it", initial=initial)

    def end_here(self) -> None:
        """The run ends with this bar: its total becomes what was done, so it shows 100% and no time left."""
        self.total = self.n
        if self.tqdm is not None:
            self.tqdm.total = self.n

    def show(self, postfix: Mapping[str, str], now: float) -> None:
        if self.tqdm is not None:
            self.tqdm.set_postfix(postfix, refresh=False)
            self.tqdm.update(self.n - self.tqdm.n)
        elif now - self.last_line >= self.line_interval:
            self._line(postfix, now)

    def close(self, postfix: Mapping[str, str]) -> None:
        if self.tqdm is None:
            self._line(postfix, time.monotonic())
        else:
            self.show(postfix, time.monotonic())
            self.tqdm.close()

    def _line(self, postfix: Mapping[str, str], now: float) -> None:
        self.last_line = now
        elapsed = now - self.start
        speed = (self.n - self.initial) / elapsed if elapsed > 0 else 0.0
        rate = f"{speed:.2f}it/s" if elapsed > 0 else "?it/s"
        count = f"{self.n}/{self.total}" if self.total is not None else str(self.n)
        # The time left in this bar at the rate so far (tqdm's "elapsed<left"); unknown without a total or a rate.
        left = "" if self.total is None else "<" + ("?" if speed <= 0 and self.n < self.total else
                                                     _format_seconds(max(0, self.total - self.n) / (speed or 1.0)))
        extras = ", ".join(f"{k}={v}" for k, v in postfix.items())
        print(f"{self.desc}: {count} [{_format_seconds(elapsed)}{left}, {rate}]" +
              (f" {extras}" if extras else ""), file=self.file, flush=True)


class ProgressBar(Callback):
    """Progress bars for ``fit``, ``validate``, ``test`` and ``predict`` (the Trainer's default).

    On a terminal each training epoch gets a tqdm bar showing batches done, batches per second, the
    loss of the latest batch and every metric logged with ``prog_bar=True``; validation, test and
    predict runs get their own bar. Bars are redrawn at most once every ``refresh_rate`` seconds, so
    the bar costs almost nothing per step. When the output is not a terminal, nothing is redrawn: a
    plain line is printed when a bar finishes (and every ``line_interval`` seconds in between), so
    log files stay readable. Only the global-zero process draws.

    Args:
        refresh_rate: Seconds between redraws. ``0`` disables the bar. (Unlike Lightning's
            ``TQDMProgressBar``, this is time, not a number of batches.)
        leave: Keep each finished training-epoch bar on screen.
        file: Where to write; ``None`` means ``sys.stderr`` at the start of each run.
        line_interval: Seconds between progress lines when the output is not a terminal.

    Example:
        >>> from stoker import Trainer
        >>> trainer = Trainer(callbacks=[ProgressBar(refresh_rate=1.0)])  # doctest: +SKIP
        >>> trainer.fit(module, loader)  # doctest: +SKIP
        Epoch 0: 100%|██████████| 250/250 [00:03<00:00, 80.1it/s, loss=0.231, val/acc=0.91]
    """

    def __init__(self, refresh_rate: float = 0.5, leave: bool = True, file: IO[str] | None = None,
                 line_interval: float = 30.0) -> None:
        if isinstance(refresh_rate, bool) or not isinstance(refresh_rate, (int, float)) or refresh_rate < 0:
            raise ValueError(
                f"ProgressBar(refresh_rate={refresh_rate!r}) must be a number of seconds >= 0 (0 disables the bar)."
            )
        if not isinstance(line_interval, (int, float)) or line_interval <= 0:
            raise ValueError(f"ProgressBar(line_interval={line_interval!r}) must be a number of seconds > 0.")
        self.refresh_rate = float(refresh_rate)
        self.leave = leave
        self.line_interval = float(line_interval)
        self._file_arg = file
        self._file: IO[str] = file or sys.stderr
        self._enabled = self.refresh_rate > 0
        self._active = False
        self._train: _Bar | None = None
        self._eval: _Bar | None = None
        self._next_draw = 0.0
        self._outputs: Any = None
        self._stdout: StdoutThroughBar | None = None  # installed while a terminal bar is drawn
        self._trainer: TrainerView | None = None

    # -- what the bars count and show (Lightning's names; for a bar of your own) ------------------------------------
    @property
    def trainer(self) -> TrainerView:
        if self._trainer is None:
            raise RuntimeError(f"{type(self).__name__}.trainer is known once a Trainer run has set the bar up; "
                               "read the totals from a hook.")
        return self._trainer

    @property
    def total_train_batches(self) -> int | float:
        """Training batches per epoch (inf: unknown)."""
        return self.trainer.num_training_batches

    @property
    def total_val_batches(self) -> int | float:
        """Validation batches of the current validation; in ``fit`` 0 for an epoch that does not validate."""
        trainer = self.trainer
        every_n = trainer.check_val_every_n_epoch
        if trainer.fitting and every_n is not None and (trainer.current_epoch + 1) % every_n:
            return 0
        return sum(trainer.num_val_batches)

    @property
    def total_test_batches(self) -> int | float:
        return sum(self.trainer.num_test_batches)

    @property
    def total_predict_batches(self) -> int | float:
        return sum(self.trainer.num_predict_batches)

    def get_metrics(self, trainer: TrainerView, module: Any) -> dict[str, int | float | str]:
        """The values the bar shows after the loss: every ``prog_bar`` metric (override it to show more or less;
        Lightning's bar adds ``v_num``, the logger's version, which stoker's leaves out)."""
        return dict(trainer.progress_bar_metrics)

    @property
    def is_enabled(self) -> bool:
        """Whether bars are drawn (``refresh_rate > 0``, not disabled, and on global zero)."""
        return self._enabled and self._active

    def disable(self) -> None:
        """Stop drawing (e.g. while printing something long)."""
        self._enabled = False

    def enable(self) -> None:
        self._enabled = self.refresh_rate > 0

    def setup(self, trainer: TrainerView, module: Any, stage: str) -> None:
        self._active = bool(trainer.is_global_zero)
        self._trainer = trainer
        self._file = self._file_arg or sys.stderr

    def __getstate__(self) -> dict[str, Any]:
        # A pickled copy (a Trainer sent to another process) draws to that process's own standard stream (by name),
        # with no live bar.
        std = next((name for name in ("stdout", "stderr") if self._file_arg is getattr(sys, name)), None)
        return dict(self.__dict__, _file=None, _stdout=None, _train=None, _eval=None, _trainer=None,
                    _file_arg=std or self._file_arg)

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if isinstance(self._file_arg, str):
            self._file_arg = getattr(sys, self._file_arg)
        self._file = self._file_arg or sys.stderr

    def _tty(self) -> bool:
        isatty = getattr(self._file, "isatty", None)
        try:
            return bool(isatty and isatty())
        except ValueError:  # a closed file
            return False

    def _new_bar(self, desc: str, total: Any, leave: bool, initial: int = 0) -> _Bar:
        self._next_draw = time.monotonic() + self.refresh_rate
        bar = _Bar(desc, _total(total), self._file, self._tty(), leave, self.line_interval, initial)
        if bar.tqdm is not None and self._stdout is None:
            self._stdout = StdoutThroughBar.install(self._shown)
        return bar

    def _shown(self) -> Any:
        """The tqdm bar on screen now (the evaluation bar over the epoch bar), or None."""
        for bar in (self._eval, self._train):
            if bar is not None and bar.tqdm is not None:
                return bar.tqdm
        return None

    def _restore_stdout(self) -> None:
        if self._stdout is not None and self._eval is None and self._train is None:
            redirect, self._stdout = self._stdout, None
            redirect.restore()

    def _postfix(self, trainer: TrainerView, with_loss: bool) -> dict[str, str]:
        postfix: dict[str, str] = {}
        outputs = self._outputs
        metrics = self.get_metrics(trainer, trainer.module)
        if with_loss:
            loss = outputs.get("loss") if isinstance(outputs, Mapping) else outputs
            if isinstance(loss, (torch.Tensor, float, int)) and not _logged(loss, metrics.values()):
                postfix["loss"] = _format_value(loss)
        for name, value in metrics.items():
            postfix[name] = _format_value(value)
        return postfix

    # -- training -----------------------------------------------------------------------------------------------
    def on_train_epoch_start(self, trainer: TrainerView, module: Any) -> None:
        if self.is_enabled:
            self._close_train(trainer)
            self._outputs = None
            done = int(getattr(getattr(trainer, "fit_loop", None), "batches_done", 0) or 0)  # resumed mid-epoch
            self._train = self._new_bar(f"Epoch {trainer.current_epoch}", _epoch_total(trainer, done), self.leave,
                                        initial=done)

    def on_train_batch_end(self, trainer: TrainerView, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        bar = self._train
        if bar is None:
            return
        bar.n += 1
        self._outputs = outputs  # a reference only; read from the device at the next redraw
        now = time.monotonic()
        if now >= self._next_draw:
            self._next_draw = now + self.refresh_rate
            bar.show(self._postfix(trainer, with_loss=True), now)

    def on_train_epoch_end(self, trainer: TrainerView, module: Any) -> None:
        if self._train is not None and _run_ends_mid_epoch(trainer, self._train):
            self._train.end_here()
        self._close_train(trainer)

    def _close_train(self, trainer: TrainerView) -> None:
        if self._train is not None:
            bar, self._train = self._train, None
            bar.close(self._postfix(trainer, with_loss=True))
        self._restore_stdout()

    # -- evaluation (validation, test, predict share one bar slot) ------------------------------------------------
    def _eval_start(self, trainer: TrainerView, stage: str) -> None:
        if not self.is_enabled:
            return
        self._close_eval(trainer, refresh_train=False)
        desc, counts_name = _EVAL_BARS[stage]
        counts = getattr(trainer, counts_name, None)
        if isinstance(counts, (list, tuple)):
            counts = None if any(_total(c) is None for c in counts) else sum(int(c) for c in counts)
        self._eval = self._new_bar(desc, counts, leave=False)

    def _eval_batch(self, trainer: TrainerView, module: Any, batch: Any, stage: str) -> None:
        bar = self._eval
        if bar is None:
            return
        bar.n += 1
        now = time.monotonic()
        if now >= self._next_draw:
            self._next_draw = now + self.refresh_rate
            bar.show({}, now)

    def _eval_end(self, trainer: TrainerView, stage: str) -> None:
        self._close_eval(trainer)

    def _close_eval(self, trainer: TrainerView, refresh_train: bool = True) -> None:
        if self._eval is not None:
            bar, self._eval = self._eval, None
            bar.close(self._postfix(trainer, with_loss=False) if bar.tqdm is None else {})
            self._restore_stdout()
        if refresh_train and self._train is not None and self._train.tqdm is not None:
            # Show fresh validation metrics on the epoch bar right away.
            self._train.show(self._postfix(trainer, with_loss=True), time.monotonic())

    on_validation_start, on_validation_batch_end, on_validation_end = evaluation_hooks("validate")
    on_test_start, on_test_batch_end, on_test_end = evaluation_hooks("test")
    on_predict_start, on_predict_batch_end, on_predict_end = evaluation_hooks("predict")

    # -- ending ---------------------------------------------------------------------------------------------------
    def _close_all(self, trainer: TrainerView) -> None:
        self._close_eval(trainer, refresh_train=False)
        self._close_train(trainer)
        self._outputs = None

    def on_train_end(self, trainer: TrainerView, module: Any) -> None:
        self._close_all(trainer)

    def on_exception(self, trainer: TrainerView, module: Any, exception: BaseException) -> None:
        self._close_all(trainer)

    def teardown(self, trainer: TrainerView, module: Any, stage: str) -> None:
        self._close_all(trainer)


class TQDMProgressBar(ProgressBar):
    """Lightning's name and arguments for the progress bar, so that ``TQDMProgressBar(refresh_rate=20)`` runs.

    ``refresh_rate`` is Lightning's number of batches between redraws: ``0`` disables the bar, any other value turns
    it on. stoker still redraws on time, at most every ``seconds`` (0.5), because each redraw reads the shown values
    from the device; redrawing every n batches would wait for the device every n steps. ``leave`` defaults to
    False, as in Lightning (:class:`ProgressBar`'s to True). ``process_position`` is accepted; stoker draws one bar
    at a time, always in the first position.

    Example:
        >>> from stoker.callbacks import TQDMProgressBar
        >>> TQDMProgressBar(refresh_rate=20).refresh_rate  # seconds, not batches
        0.5
    """

    def __init__(self, refresh_rate: int = 1, process_position: int = 0, leave: bool = False,
                 seconds: float = 0.5) -> None:
        if isinstance(refresh_rate, bool) or not isinstance(refresh_rate, int) or refresh_rate < 0:
            raise ValueError(f"TQDMProgressBar(refresh_rate={refresh_rate!r}) must be a number of batches >= 0 "
                             "(0 disables the bar).")
        if isinstance(process_position, bool) or not isinstance(process_position, int) or process_position < 0:
            raise ValueError(f"TQDMProgressBar(process_position={process_position!r}) must be an integer >= 0.")
        super().__init__(refresh_rate=seconds if refresh_rate else 0, leave=leave)
        self.batches_per_refresh = refresh_rate
        self.process_position = process_position
