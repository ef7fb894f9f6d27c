"""`Timer`: measures time per stage and stops ``fit`` cleanly, with a checkpoint, after a duration.

This module owns the wall-clock bookkeeping (per stage, carried across resumes through the callback's
state) and the decision to stop. It does not own how a checkpoint is written: it asks the Trainer's
`ModelCheckpoint` (or, without one, ``trainer.save_checkpoint``) to write the ``last`` folder, which
``fit(ckpt_path="last")`` finds.

Cost: one ``time.monotonic()`` call per training batch; no device work.
"""

from __future__ import annotations

import logging
import os
import re
import time
from datetime import timedelta
from typing import Any

from stoker.callbacks._fit_progress import agreed_any
from stoker.callbacks.base import Callback, TrainerView
from stoker.loggers.layout import default_checkpoint_dir

log = logging.getLogger(__name__)

__all__ = ["Timer"]

_STAGES = ("train", "validate", "test", "predict")
_DURATION = re.compile(r"^(\d+):(\d{1,2}):(\d{1,2}):(\d{1,2})$")
# With several processes a check is a collective (all must stop at the same step): do it every n steps only.
SYNC_EVERY_N_STEPS = 10
_DICT_KEYS = ("weeks", "days", "hours", "minutes", "seconds", "milliseconds", "microseconds")


def parse_duration(duration: timedelta | str | dict | None) -> timedelta | None:
    """A ``timedelta`` from a ``timedelta``, a ``"DD:HH:MM:SS"`` string or a ``timedelta`` keyword dict.

    Example:
        >>> parse_duration("01:02:00:30")
        datetime.timedelta(days=1, seconds=7230)
        >>> parse_duration({"minutes": 5})
        datetime.timedelta(seconds=300)
    """
    if duration is None or isinstance(duration, timedelta):
        value = duration
    elif isinstance(duration, str):
        match = _DURATION.match(duration.strip())
        if match is None:
            raise ValueError(
                f"`Timer(duration={duration!r})` is not a valid duration. Expected a string in the format "
                "DD:HH:MM:SS, e.g. '00:12:00:00' for twelve hours."
            )
        days, hours, minutes, seconds = (int(g) for g in match.groups())
        value = timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)
    elif isinstance(duration, dict):
        unknown = sorted(set(duration) - set(_DICT_KEYS))
        if unknown:
            raise ValueError(
                f"Timer(duration={duration!r}) has unknown key(s) {unknown}. Expected keys of "
                f"datetime.timedelta: {', '.join(_DICT_KEYS)}."
            )
        value = timedelta(**duration)
    else:
        raise TypeError(
            f"Timer(duration={duration!r}) has type {type(duration).__name__}. Expected a datetime.timedelta, "
            "a 'DD:HH:MM:SS' string, a dict such as {'hours': 2}, or None (measure only)."
        )
    if value is not None and value.total_seconds() < 0:
        raise ValueError(f"Timer(duration={duration!r}) is negative; pass a positive duration.")
    return value


class Timer(Callback):
    """Stops ``fit`` once ``duration`` of training time has passed, saving a checkpoint first.

    The elapsed time of each stage (``"train"``, ``"validate"``, ``"test"``, ``"predict"``) is kept in
    the callback's state, so a run resumed from a checkpoint continues counting from where it stopped.
    Training time is checked after every optimizer step (never in the middle of an accumulation
    window; with several processes every ``SYNC_EVERY_N_STEPS`` = 10 steps, because the processes
    must agree, with a collective, to stop at the same step) and at the end of each training epoch and
    validation run, and when a resumed ``fit`` starts: a duration used up before its checkpoint stops it before
    its first step (a fresh run takes at least one step, even with a zero duration). When the time is up (on any
    process) the Timer writes the ``last`` checkpoint (through the Trainer's `ModelCheckpoint` when there is one, else into
    ``{default_root_dir}/checkpoints/last``) and sets ``trainer.should_stop``; the Trainer then ends
    the run normally. ``duration=None`` measures only.

    Args:
        duration: A ``datetime.timedelta``, a ``"DD:HH:MM:SS"`` string, a dict of ``timedelta``
            keywords such as ``{"hours": 12}``, or ``None``.
        interval: ``"step"`` checks after every optimizer step; ``"epoch"`` only at epoch ends.
        verbose: Print a line when the duration stops the run (Lightning's argument; False: stop silently).

    Example:
        >>> from stoker import Trainer
        >>> timer = Timer(duration="00:12:00:00")          # twelve hours
        >>> trainer = Trainer(callbacks=[timer])           # doctest: +SKIP
        >>> trainer.fit(module, loader)                    # doctest: +SKIP
        >>> timer.time_elapsed("train")                    # doctest: +SKIP
        43199.7
    """

    def __init__(self, duration: timedelta | str | dict | None = None, interval: str = "step",
                 verbose: bool = True) -> None:
        self.duration = parse_duration(duration)
        if interval not in ("step", "epoch"):
            raise ValueError(f"Unsupported parameter value `Timer(interval={interval})`. Possible choices are: step, "
                             f"epoch. (Timer(interval={interval!r}) is not an interval.)")
        self.interval, self.verbose = interval, verbose
        self._offset = {stage: 0.0 for stage in _STAGES}  # seconds from before a resume
        self._start: dict[str, float | None] = dict.fromkeys(_STAGES)
        self._end: dict[str, float | None] = dict.fromkeys(_STAGES)
        self.stopped = False
        self.stopping_reason = ""  # why it stopped the run (the Trainer's closing line quotes it)

    # -- queries ------------------------------------------------------------------------------------------------
    def start_time(self, stage: str = "train") -> float | None:
        """``time.monotonic()`` at which ``stage`` started in this process, or ``None``."""
        return self._start[_check_stage(stage)]

    def end_time(self, stage: str = "train") -> float | None:
        """``time.monotonic()`` at which ``stage`` ended in this process, or ``None``."""
        return self._end[_check_stage(stage)]

    def time_elapsed(self, stage: str = "train") -> float:
        """Seconds spent in ``stage``, including the time from before a resume."""
        start, end = self._start[_check_stage(stage)], self._end[stage]
        if start is None:
            return self._offset[stage]
        return self._offset[stage] + ((end if end is not None else time.monotonic()) - start)

    def time_remaining(self, stage: str = "train") -> float | None:
        """Seconds left of ``duration`` in ``stage`` (may be negative), or ``None`` without a duration."""
        if self.duration is None:
            return None
        return self.duration.total_seconds() - self.time_elapsed(stage)

    # -- stage bookkeeping --------------------------------------------------------------------------------------
    def _begin(self, stage: str) -> None:
        if self._start[stage] is not None and self._end[stage] is not None:
            # A second run of a stage in the same process (e.g. validation every epoch) keeps counting.
            self._offset[stage] += self._end[stage] - self._start[stage]
        self._start[stage], self._end[stage] = time.monotonic(), None

    def _finish(self, stage: str) -> None:
        if self._start[stage] is not None and self._end[stage] is None:
            self._end[stage] = time.monotonic()

    def on_fit_start(self, trainer: TrainerView, module: Any) -> None:
        # A duration used up before the checkpoint this fit resumes from: stop before the first step rather than
        # after it. (A fresh run always takes its first step: a zero duration stops it after one.)
        if self._offset["train"] > 0:
            self._check(trainer, before_training=True)

    def on_train_start(self, trainer: TrainerView, module: Any) -> None:
        self._begin("train")

    def on_train_end(self, trainer: TrainerView, module: Any) -> None:
        self._finish("train")

    def on_validation_start(self, trainer: TrainerView, module: Any) -> None:
        self._begin("validate")

    def on_validation_end(self, trainer: TrainerView, module: Any) -> None:
        self._finish("validate")
        if self._start["train"] is not None and self._end["train"] is None:  # validation inside fit
            self._check(trainer)

    def on_test_start(self, trainer: TrainerView, module: Any) -> None:
        self._begin("test")

    def on_test_end(self, trainer: TrainerView, module: Any) -> None:
        self._finish("test")

    def on_predict_start(self, trainer: TrainerView, module: Any) -> None:
        self._begin("predict")

    def on_predict_end(self, trainer: TrainerView, module: Any) -> None:
        self._finish("predict")

    # -- stopping -----------------------------------------------------------------------------------------------
    def on_train_batch_end(self, trainer: TrainerView, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if self.duration is None or self.interval != "step":
            return
        if not trainer.window_closed:  # inside an accumulation window: never stop between micro-steps
            return
        if trainer.accelerator.num_processes > 1 and trainer.global_step % SYNC_EVERY_N_STEPS:
            return
        self._check(trainer)

    def on_train_epoch_end(self, trainer: TrainerView, module: Any) -> None:
        self._check(trainer)

    def _check(self, trainer: TrainerView, before_training: bool = False) -> None:
        if self.duration is None or self.stopped or (self._start["train"] is None and not before_training):
            return
        if not agreed_any(trainer, self.time_elapsed("train") >= self.duration.total_seconds()):
            return
        self.stopped = True
        self.stopping_reason = f"duration {self.duration} reached after {self.time_elapsed('train'):.1f}s of training"
        trainer.should_stop = True
        _save_last(trainer)
        if trainer.is_global_zero:  # Lightning's record, for a script's logging set-up (silent without a handler)
            log.info(f"Time limit reached. Elapsed time is {timedelta(seconds=int(self.time_elapsed('train')))}. "
                     "Signaling Trainer to stop.")
        if self.verbose and trainer.is_global_zero:
            print(f"Timer: duration {self.duration} reached after {self.time_elapsed('train'):.1f}s of "
                  f"training (step {trainer.global_step}); stopped with a checkpoint.")

    # -- state --------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        return {"time_elapsed": {stage: float(self.time_elapsed(stage)) for stage in _STAGES}}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        elapsed = state_dict.get("time_elapsed", {})
        self._offset = {stage: float(elapsed.get(stage, 0.0)) for stage in _STAGES}
        self._start = dict.fromkeys(_STAGES)
        self._end = dict.fromkeys(_STAGES)


def _check_stage(stage: str) -> str:
    if stage not in _STAGES:
        raise ValueError(f"Timer stage {stage!r} is not a stage. Expected one of: {', '.join(map(repr, _STAGES))}.")
    return stage


def _save_last(trainer: TrainerView) -> None:
    """Writes the ``last`` checkpoint now: through the `ModelCheckpoint` if any, else directly."""
    callback = trainer.checkpoint_callback
    if callback is not None:
        callback.save_last_now(trainer)
    else:
        folder = default_checkpoint_dir(trainer.default_root_dir, trainer.loggers)
        trainer.save_checkpoint(os.path.join(folder, "last.ckpt"))
