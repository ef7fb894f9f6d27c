"""`ProgressBar`: tqdm bars for training, validation, test and predict, redrawn on a time interval, and Lightning's
`TQDMProgressBar`, redrawn every n batches.

This module owns when the bars are made, counted, redrawn and closed, and what they show (the loss of the latest
batch, ``v_num`` and every ``prog_bar`` metric). It does not own the metric values (the Trainer's
``progress_bar_metrics``) nor how one bar is drawn (``progress_draw.py``).

Cost: per batch, an integer increment, a reference to the outputs and one ``time.monotonic()``; the loss and metrics
are read from the device (``.item()``) only when the shown values are refreshed, at most once every ``refresh_rate``
seconds (``TQDMProgressBar``: its ``seconds``), however often the count is redrawn. tqdm is imported when the first
bar is made (``progress_tqdm.py``); while a bar is on a terminal, stdout goes through it (``progress_io.py``).
"""

from __future__ import annotations

import os
import sys
import time
from typing import IO, TYPE_CHECKING, Any

from stoker.callbacks.base import Callback, TrainerView, evaluation_hooks
from stoker.callbacks.progress_draw import (DISCARD, DrawnBar, bar_property, bar_total, epoch_total, logger_version,
                                           batches_per_refresh, prepare, run_ends_mid_epoch, shown_values,
                                           tqdm_class)
from stoker.callbacks.progress_io import StdoutThroughBar

if TYPE_CHECKING:
    from stoker.callbacks.progress_tqdm import Tqdm

__all__ = ["ProgressBar", "TQDMProgressBar"]

# Lightning's module path `stoker.callbacks.progress.tqdm_progress` (where `Tqdm` lives) is a face kept in
# stoker/faces/callbacks/progress/, found through this __path__ entry; this module imports nothing from it.
__path__ = [os.path.join(os.path.dirname(os.path.dirname(__file__)), "faces", "callbacks", "progress")]

# Per evaluation stage: its stage_record.loader_batches key, the bar's name, its factory and its title's attribute.
_EVAL_BARS = {"validate": ("validate", "val", "init_validation_tqdm", "validation_description"),
              "test": ("test", "test", "init_test_tqdm", "test_description"),
              "predict": ("predict", "predict", "init_predict_tqdm", "predict_description"),
              "sanity": ("validate", "val", "init_sanity_tqdm", "sanity_check_description")}


class ProgressBar(Callback):
    """Progress bars for ``fit``, ``validate``, ``test`` and ``predict`` (the Trainer's default).

    On a terminal each training epoch gets a tqdm bar showing batches done, batches per second, the loss of the
    latest batch, ``v_num`` (the logger's version) and every metric logged with ``prog_bar=True``; validation,
    test and predict runs get their own bar. Bars are redrawn at most once every ``refresh_rate`` seconds, so the
    bar costs almost nothing per step. When the output is not a terminal, nothing is redrawn: a plain line is
    printed when a bar finishes (and every ``line_interval`` seconds in between), so log files stay readable. Only
    the global-zero process draws. The bars are made by ``init_train_tqdm`` and its siblings (override one to change
    a bar) and can be read as ``train_progress_bar``, ``val_progress_bar``, ``test_progress_bar`` and
    ``predict_progress_bar`` (``bars`` holds them by name).

    Args:
        refresh_rate: Seconds between redraws. ``0`` disables the bar. (Lightning's ``TQDMProgressBar`` counts
            batches instead.)
        leave: A new bar for each training epoch, kept on screen; ``False``: one bar for the whole fit.
        file: Where to write; ``None`` means ``sys.stderr`` at the start of each run.
        line_interval: Seconds between progress lines when the output is not a terminal.

    Example:
        >>> from stoker import Trainer
        >>> trainer = Trainer(callbacks=[ProgressBar(refresh_rate=1.0)])  # doctest: +SKIP
        >>> trainer.fit(module, loader)  # doctest: +SKIP
        Epoch 0: 100%|██████████| 250/250 [00:03<00:00, 80.1it/s, loss=0.231, v_num=0, val/acc=0.910]
    """

    sanity_check_description = "Sanity Checking"
    train_description = "Training"
    validation_description = "Validation"
    test_description = "Testing"
    predict_description = "Predicting"
    stdout_through_bar = True  # False: the display sends prints above itself (RichProgressBar's rich display)

    def __init__(self, refresh_rate: float = 0.5, leave: bool = True, file: IO[str] | None = None,
                 line_interval: float = 30.0) -> None:
        if isinstance(refresh_rate, bool) or not isinstance(refresh_rate, (int, float)) or refresh_rate < 0:
            raise ValueError(
                f"ProgressBar(refresh_rate={refresh_rate!r}) must be a number of seconds >= 0 (0 disables the bar)."
            )
        if not isinstance(line_interval, (int, float)) or line_interval <= 0:
            raise ValueError(f"ProgressBar(line_interval={line_interval!r}) must be a number of seconds > 0.")
        self._refresh_rate: int | float = float(refresh_rate)
        self._interval = float(refresh_rate)  # seconds between reads of the shown values from the device
        self.leave = leave
        self.line_interval = float(line_interval)
        self.process_position = 0
        self._file_arg = file
        self._file: IO[str] = file or sys.stderr
        self._enabled = self._refresh_rate > 0
        self._active = False
        self.bars: dict[str, Tqdm | None] = dict.fromkeys(("train", "val", "test", "predict"))
        self._train_open = False  # the training tqdm object is open and serves the next epoch (leave=False)
        self._train: DrawnBar | None = None
        self._eval: DrawnBar | None = None
        self._next_values = 0.0
        self._outputs: Any = None
        self._stdout: StdoutThroughBar | None = None  # installed while a terminal bar is drawn
        self._trainer: TrainerView | None = None

    train_progress_bar = bar_property("train", "The training bar (one per epoch with ``leave``).")
    val_progress_bar = bar_property("val", "The bar of the latest validation (or sanity check).")
    test_progress_bar = bar_property("test", "The bar of the latest test.")
    predict_progress_bar = bar_property("predict", "The bar of the latest predict.")

    @property
    def refresh_rate(self) -> int | float:
        """Seconds between redraws (``TQDMProgressBar``: batches)."""
        return self._refresh_rate

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
        return sum(trainer.stage_record.loader_batches.get("validate", []))

    @property
    def total_test_batches(self) -> int | float:  # the batches that run: a CombinedLoader's combined ones
        return sum(self.trainer.stage_record.loader_batches.get("test", []))

    @property
    def total_predict_batches(self) -> int | float:
        return sum(self.trainer.stage_record.loader_batches.get("predict", []))

    def get_metrics(self, trainer: TrainerView, module: Any) -> dict[str, int | float | str]:
        """The values the bar shows after the loss: ``v_num`` (the logger's version, when there is a logger) and
        every ``prog_bar`` metric (a metric logged as ``v_num`` wins). Override it to show more or less."""
        version = logger_version(trainer.loggers)
        return {**({} if version is None else {"v_num": version}), **trainer.progress_bar_metrics}

    @property
    def is_enabled(self) -> bool:
        """Whether bars are drawn (``refresh_rate > 0``, not disabled, and on global zero)."""
        return self._enabled and self._active

    @property
    def is_disabled(self) -> bool:
        return not self.is_enabled

    def disable(self) -> None:
        """Stop drawing (e.g. while printing something long)."""
        self._enabled = False

    def enable(self) -> None:
        self._enabled = self._refresh_rate > 0

    def print(self, *args: Any, sep: str = " ", **kwargs: Any) -> None:
        """``print`` that keeps the bars whole: through the tqdm object of the first open bar (tqdm clears the bars,
        writes the line and redraws them), or plain ``print`` when no bar is open."""
        bar = next((b for b in self.bars.values() if b is not None and not b.disable), None)
        if bar is None:
            print(*args, sep=sep, **kwargs)
            return
        flush = kwargs.pop("flush", False)  # print's argument, not tqdm.write's
        bar.write(sep.join(map(str, args)), **kwargs)
        if flush:
            (kwargs.get("file") or sys.stdout).flush()

    # -- the bars' factories (override one to change that bar; call super() to start from stoker's) ----------------
    def _make_tqdm(self, desc: str, leave: bool, position: int = 0, **options: Any) -> Tqdm:
        """A tqdm object drawing to the bar's file on a terminal, into nothing elsewhere (plain lines are printed
        instead); ``position`` counts lines below the ``process_position`` offset."""
        return tqdm_class()(desc=desc, position=2 * self.process_position + position, disable=self.is_disabled,
                             leave=leave, dynamic_ncols=True, file=self._file if self._tty() else DISCARD,
                             **options)

    def init_sanity_tqdm(self) -> Tqdm:
        """The bar of the sanity check (validation batches before training)."""
        return self._make_tqdm(self.sanity_check_description, leave=False)

    def init_train_tqdm(self) -> Tqdm:
        """The training bar: made when training starts, and for each epoch with ``leave``."""
        return self._make_tqdm(self.train_description, leave=True, smoothing=0)

    def init_validation_tqdm(self) -> Tqdm:
        """The validation bar: in ``fit`` one line under the training bar and erased when done."""
        in_fit = self.trainer.fitting
        return self._make_tqdm(self.validation_description, leave=not in_fit, position=int(in_fit))

    def init_test_tqdm(self) -> Tqdm:
        return self._make_tqdm(self.test_description, leave=True)

    def init_predict_tqdm(self) -> Tqdm:
        return self._make_tqdm(self.predict_description, leave=True, smoothing=0)

    # -- set-up, pickling, output ---------------------------------------------------------------------------------
    def setup(self, trainer: TrainerView, module: Any, stage: str) -> None:
        self._active = bool(trainer.is_global_zero)
        self._trainer = trainer
        self._file = self._file_arg or sys.stderr

    def __getstate__(self) -> dict[str, Any]:
        # A pickled copy (a Trainer sent to another process) draws to that process's own standard stream (by name),
        # with no live bar (tqdm objects do not pickle).
        std = next((name for name in ("stdout", "stderr") if self._file_arg is getattr(sys, name)), None)
        return dict(self.__dict__, _file=None, _stdout=None, _train=None, _eval=None, _trainer=None,
                    bars=dict.fromkeys(self.bars), _train_open=False, _file_arg=std or self._file_arg)

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

    def _new_bar(self, bar: Tqdm, label: str, total: Any, initial: int = 0) -> DrawnBar | None:
        """``bar`` readied for a count; drawn and counted only while the bars are enabled (a disabled bar, as on a
        process other than global zero, still tells its total)."""
        if not self.is_enabled:
            prepare(bar, label, bar_total(total))
            return None
        self._next_values = time.monotonic() + self._interval
        drawn = DrawnBar(bar, label, bar_total(total), self._tty(), self._file, self.line_interval, initial)
        if drawn.tty and self._stdout is None and self.stdout_through_bar:
            self._stdout = StdoutThroughBar.install(self._shown)
        return drawn

    def _shown(self) -> Any:
        """The tqdm bar on screen now (the evaluation bar over the epoch bar), or None."""
        for bar in (self._eval, self._train):
            if bar is not None and bar.tty:
                return bar.tqdm
        return None

    def _restore_stdout(self) -> None:
        if self._stdout is not None and self._eval is None and self._train is None:
            redirect, self._stdout = self._stdout, None
            redirect.restore()

    def _postfix(self, trainer: TrainerView, metrics: dict[str, Any] | None = None) -> dict[str, Any]:
        """The epoch bar's values, read now: the latest loss (unless on the bar already), then ``metrics``."""
        return shown_values(self._outputs, self.get_metrics(trainer, trainer.module) if metrics is None else metrics)

    # -- when to redraw --------------------------------------------------------------------------------------------
    def _redraw_due(self, n: int, total: int | None, now: float) -> bool:
        """Whether the count is redrawn after batch ``n``: here when ``refresh_rate`` seconds have passed."""
        return now >= self._next_values

    def _advance(self, bar: DrawnBar, trainer: TrainerView, with_values: bool) -> None:
        """After a batch: redraw the count when due, and the shown values when their interval has passed too."""
        now = time.monotonic()
        if not self._redraw_due(bar.n, bar.total, now):
            return
        values = None
        if now >= self._next_values:
            self._next_values = now + self._interval
            values = self._postfix(trainer) if with_values else None
        bar.show(values, now)

    # -- training -----------------------------------------------------------------------------------------------
    def on_train_start(self, trainer: TrainerView, module: Any) -> None:
        self._close_train(trainer, close=True)
        self.bars["train"], self._train_open = self.init_train_tqdm(), True

    def on_train_epoch_start(self, trainer: TrainerView, module: Any) -> None:
        if self._train is not None:  # an epoch that did not reach its end hook
            self._close_train(trainer, close=self.leave)
        if self.leave or not self._train_open:  # with `leave` each epoch gets a bar of its own from the factory
            if self._train_open:  # the bar made at the start served no epoch: erased, not left as an empty line
                self.train_progress_bar.leave = False
                self.train_progress_bar.close()
            self.bars["train"], self._train_open = self.init_train_tqdm(), True
        self._outputs = None
        done = int(getattr(getattr(trainer, "fit_loop", None), "batches_done", 0) or 0)  # resumed mid-epoch
        self._train = self._new_bar(self.train_progress_bar, f"Epoch {trainer.current_epoch}",
                                    epoch_total(trainer, done), initial=done)

    def on_train_batch_end(self, trainer: TrainerView, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        bar = self._train
        if bar is None:
            return
        bar.n += 1
        self._outputs = outputs  # a reference only; read from the device when the shown values are refreshed
        self._advance(bar, trainer, with_values=True)

    def on_train_epoch_end(self, trainer: TrainerView, module: Any) -> None:
        if self._train is not None and run_ends_mid_epoch(trainer, self._train):
            self._train.end_here()
        self._close_train(trainer, close=self.leave)

    def _close_train(self, trainer: TrainerView, close: bool) -> None:
        """Finishes the epoch's bar; ``close`` ends its tqdm object too (kept open to serve the next epoch)."""
        if self._train is not None:
            bar, self._train = self._train, None
            bar.finish(self._postfix(trainer), close=close)
        elif close and self._train_open:
            self.train_progress_bar.close()
        self._train_open = self._train_open and not close
        self._restore_stdout()

    # -- evaluation (validation, test, predict share one bar slot) ------------------------------------------------
    def _eval_start(self, trainer: TrainerView, stage: str) -> None:
        self._close_eval(trainer, refresh_train=False)
        sanity = stage == "validate" and trainer.sanity_checking
        counts_name, name, make, label = _EVAL_BARS["sanity" if sanity else stage]
        counts = trainer.stage_record.loader_batches.get(counts_name)
        steps = trainer.options.num_sanity_val_steps if sanity else None
        if steps is not None and isinstance(counts, (list, tuple)):
            counts = [min(steps, n) for n in counts]  # a sanity check runs at most that many of each loader
        if isinstance(counts, (list, tuple)):
            counts = None if any(bar_total(c) is None for c in counts) else sum(int(c) for c in counts)
        self.bars[name] = getattr(self, make)()
        self._eval = self._new_bar(self.bars[name], getattr(self, label), counts)

    def _eval_batch(self, trainer: TrainerView, module: Any, batch: Any, stage: str) -> None:
        bar = self._eval
        if bar is not None:
            bar.n += 1
            self._advance(bar, trainer, with_values=False)

    def _eval_end(self, trainer: TrainerView, stage: str) -> None:
        self._close_eval(trainer)

    def _close_eval(self, trainer: TrainerView, refresh_train: bool = True) -> None:
        metrics = None  # read once (a device read) for the evaluation's plain line and the epoch bar
        if self._eval is not None:
            bar, self._eval = self._eval, None
            metrics = None if bar.tty else self.get_metrics(trainer, trainer.module)
            bar.finish(None if metrics is None else shown_values(None, metrics), close=True)
            self._restore_stdout()
        if refresh_train and self._train is not None:
            self._train.show(self._postfix(trainer, metrics), time.monotonic(), count=False)  # the fresh metrics now

    on_validation_start, on_validation_batch_end, on_validation_end = evaluation_hooks("validate")
    on_test_start, on_test_batch_end, on_test_end = evaluation_hooks("test")
    on_predict_start, on_predict_batch_end, on_predict_end = evaluation_hooks("predict")

    # -- ending ---------------------------------------------------------------------------------------------------
    def _close_all(self, trainer: TrainerView) -> None:
        self._close_eval(trainer, refresh_train=False)
        self._close_train(trainer, close=True)
        self._outputs = None

    def on_train_end(self, trainer: TrainerView, module: Any) -> None:
        self._close_all(trainer)

    def on_exception(self, trainer: TrainerView, module: Any, exception: BaseException) -> None:
        self._close_all(trainer)

    def teardown(self, trainer: TrainerView, module: Any, stage: str) -> None:
        self._close_all(trainer)


class TQDMProgressBar(ProgressBar):
    """Lightning's progress bar: the count is redrawn every ``refresh_rate`` batches (and at a bar's last batch).

    The values beside the count (loss, ``v_num``, ``prog_bar`` metrics) are read from the device at most every
    ``seconds`` and at each epoch's and validation's end: reading them at every redraw would make each step wait for
    the device (``seconds=0`` does, as Lightning). ``leave=False`` (Lightning's default): one training bar per fit.

    Example:
        >>> from stoker.callbacks import TQDMProgressBar
        >>> TQDMProgressBar(refresh_rate=20).refresh_rate  # batches
        20
    """

    def __init__(self, refresh_rate: int = 1, process_position: int = 0, leave: bool = False,
                 seconds: float = 0.5) -> None:
        for name, value, kind, what in (("refresh_rate", refresh_rate, int, "number of batches >= 0 (0: no bar)"),
                                        ("process_position", process_position, int, "whole number >= 0"),
                                        ("seconds", seconds, (int, float), "number of seconds >= 0")):
            if isinstance(value, bool) or not isinstance(value, kind) or value < 0:
                raise ValueError(f"TQDMProgressBar({name}={value!r}) must be a {what}.")
        super().__init__(refresh_rate=seconds, leave=leave)
        self._refresh_rate = batches_per_refresh(refresh_rate)
        self._enabled = self._refresh_rate > 0
        self.process_position = process_position  # the bars go that many pairs of lines down, below your own
        self.seconds = float(seconds)

    @property
    def batches_per_refresh(self) -> int:  # `refresh_rate`, by the name earlier stoker releases gave it
        return int(self._refresh_rate)

    def _redraw_due(self, n: int, total: int | None, now: float) -> bool:
        return n % self._refresh_rate == 0 or n == total
