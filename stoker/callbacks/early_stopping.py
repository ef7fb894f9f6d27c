"""`EarlyStopping`: stop ``fit`` when a monitored metric stops improving.

This module owns the improvement test (mode, ``min_delta``, patience) and its state. It reads the
metric from ``trainer.callback_metrics`` (one host read per check, i.e. once per validation run or
epoch, never per step) and stops by setting ``trainer.should_stop``.
"""

from __future__ import annotations

import logging
import math
import warnings
from enum import Enum
from typing import Any

import torch

from stoker.callbacks._fit_progress import agreed_mean, fit_validates, monitored_value, no_metric_message
from stoker.callbacks.base import Callback, TrainerView
from stoker.user_frame import user_stacklevel

__all__ = ["EarlyStopping", "EarlyStoppingReason"]

# The stop message goes to this logger ("stoker.callbacks.early_stopping", INFO), as Lightning's goes to its module's.
log = logging.getLogger(__name__)

_MODES = ("min", "max")


class EarlyStoppingReason(Enum):
    """Why `EarlyStopping` stopped the run (``stopping_reason``); its ``stopping_reason_message`` says it in words."""

    NOT_STOPPED = 0
    STOPPING_THRESHOLD = 1
    DIVERGENCE_THRESHOLD = 2
    PATIENCE_EXHAUSTED = 3
    NON_FINITE_METRIC = 4


class EarlyStopping(Callback):
    """Stops training when ``monitor`` has not improved for ``patience`` checks in a row.

    The metric is checked after each validation run inside ``fit`` or, when the run has no
    validation data, at the end of each training epoch (``check_on_train_epoch_end`` chooses
    otherwise). An improvement is a value below ``best - min_delta`` (``mode="min"``) or above
    ``best + min_delta`` (``mode="max"``). A check stops the run at once, before patience, when the
    value is not finite (``check_finite``), better than ``stopping_threshold`` (good enough) or worse
    than ``divergence_threshold`` (hopeless); ``stopping_reason`` (an `EarlyStoppingReason`) says which, and
    ``stopping_reason_message`` (None until a stop) says it in words; the stop is logged (INFO) through this
    module's ``log``, prefixed ``[rank: N]`` when several processes run. The counters
    (``wait_count``, ``best_score``, ``stopped_epoch``) are saved in checkpoints, so patience carries
    across a resume. A fit resumed from a checkpoint written after this callback stopped the run stops before
    another step, as the uninterrupted fit did, when this callback's settings still decide that stop (the saved
    ``wait_count`` reaches ``patience``; the last checked value still passes the threshold that stopped it): a
    resume with a larger ``patience`` or another threshold trains on.

    Args:
        monitor: Name of a metric in ``trainer.callback_metrics``, e.g. ``"val/loss"``.
        mode: ``"min"`` or ``"max"``: which direction is better.
        patience: Number of checks without improvement after which training stops.
        min_delta: Smallest change that counts as an improvement (>= 0).
        strict: Raise when ``monitor`` is missing (``True``), or warn and skip the check.
        check_finite: Stop at once when the metric becomes NaN or infinite.
        stopping_threshold: Stop at once when the metric is better than this (strictly below it for
            ``"min"``, above it for ``"max"``); None: no threshold.
        divergence_threshold: Stop at once when the metric is worse than this (strictly above it for
            ``"min"``, below it for ``"max"``); None: no threshold.
        check_on_train_epoch_end: True: check at the end of every training epoch (after that epoch's
            validation, if any); False: check only after validation runs; None (default): after
            validation runs, or at epoch ends when the fit has no validation.
        verbose: Also print each improvement (main process).

    Example:
        >>> from stoker import Trainer
        >>> stop = EarlyStopping("val/loss", patience=5, min_delta=1e-3)
        >>> trainer = Trainer(max_epochs=100, callbacks=[stop])  # doctest: +SKIP
        >>> trainer.fit(module, train_loader, val_loader)         # doctest: +SKIP
        >>> stop.stopped_epoch                                    # doctest: +SKIP
        17
    """

    def __init__(
        self,
        monitor: str,
        mode: str = "min",
        patience: int = 3,
        min_delta: float = 0.0,
        strict: bool = True,
        check_finite: bool = True,
        stopping_threshold: float | None = None,
        divergence_threshold: float | None = None,
        check_on_train_epoch_end: bool | None = None,
        verbose: bool = False,
    ) -> None:
        if not isinstance(monitor, str) or not monitor:
            raise TypeError(f"EarlyStopping(monitor={monitor!r}) must be a metric name such as 'val/loss'.")
        if mode not in _MODES:
            raise ValueError(f"`mode` can be min, max, got {mode}: EarlyStopping(mode={mode!r}) is not a mode. "
                             "Expected 'min' or 'max'.")
        if isinstance(patience, bool) or not isinstance(patience, int) or patience < 0:
            raise ValueError(f"EarlyStopping(patience={patience!r}) must be an int >= 0.")
        if not isinstance(min_delta, (int, float)) or min_delta < 0:
            raise ValueError(
                f"EarlyStopping(min_delta={min_delta!r}) must be a number >= 0; the direction comes from `mode`."
            )
        for name, value in (("stopping_threshold", stopping_threshold), ("divergence_threshold", divergence_threshold)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                      or math.isnan(value)):
                raise ValueError(f"EarlyStopping({name}={value!r}) must be a number or None.")
        if not (check_on_train_epoch_end is None or isinstance(check_on_train_epoch_end, bool)):
            raise ValueError(f"EarlyStopping(check_on_train_epoch_end={check_on_train_epoch_end!r}) must be True, "
                             "False or None.")
        self.monitor = monitor
        self.mode = mode
        self.patience = patience
        self.min_delta = float(min_delta)
        self.strict = strict
        self.check_finite = check_finite
        self.stopping_threshold = None if stopping_threshold is None else float(stopping_threshold)
        self.divergence_threshold = None if divergence_threshold is None else float(divergence_threshold)
        self.check_on_train_epoch_end = check_on_train_epoch_end
        self.verbose = bool(verbose)
        self.wait_count = 0
        self.stopped_epoch = -1
        self.best_score = math.inf if mode == "min" else -math.inf
        self.stopping_reason = EarlyStoppingReason.NOT_STOPPED
        self.stopping_reason_message: str | None = None
        self.last_score: float | None = None  # the last value checked (None: none yet, or not in the checkpoint)
        self._restored_stop = False  # the state a resumed fit restored stops the run (_still_stops)

    @property
    def state_key(self) -> str:
        return self._generate_state_key(monitor=self.monitor, mode=self.mode)

    def setup(self, trainer: TrainerView, module: Any, stage: str) -> None:
        self._restored_stop = False  # a resumed fit restores its state after setup

    def on_fit_start(self, trainer: TrainerView, module: Any) -> None:
        # A checkpoint written after this callback stopped the run (at that validation's end, or by an epoch cut
        # short): the resumed fit stops where the uninterrupted one did, before another step.
        if self._restored_stop:
            self._restored_stop = False
            trainer.should_stop = True

    def _at_epoch_end(self, trainer: TrainerView) -> bool:
        """Whether the check runs at each epoch's end (else after each validation). None: Lightning's rule, at the
        epoch's end when the fit validates once per epoch at its end (after the module's ``on_train_epoch_end``,
        which may log the monitored value) or not at all; after each validation when it validates more or less
        often."""
        if self.check_on_train_epoch_end is not None:
            return self.check_on_train_epoch_end
        once_at_the_end = trainer.val_check_interval == 1.0 and trainer.check_val_every_n_epoch == 1
        return once_at_the_end or not fit_validates(trainer)

    def on_validation_end(self, trainer: TrainerView, module: Any) -> None:
        # Not trainer.validate(), and not the sanity check: its metrics come from untrained weights and are dropped.
        if trainer.fitting and not trainer.sanity_checking and not self._at_epoch_end(trainer):
            self._run_early_stopping_check(trainer)

    def on_train_epoch_end(self, trainer: TrainerView, module: Any) -> None:
        # An epoch cut short by a stop is no check.
        if self._at_epoch_end(trainer) and trainer.epoch_finished:
            self._run_early_stopping_check(trainer)

    def _run_early_stopping_check(self, trainer: TrainerView) -> None:
        if trainer.dry_run:  # a debugging run decides nothing (Lightning's rule)
            return
        metrics = trainer.callback_metrics
        if self.monitor not in metrics:
            message = no_metric_message(f"EarlyStopping(monitor={self.monitor!r})", self.monitor, metrics,
                                        " in validation_step (or training_step), or monitor one of them.")
            if self.strict:
                raise RuntimeError(message)
            warnings.warn(message + " Skipping this check (strict=False).", RuntimeWarning,
                          stacklevel=user_stacklevel())
            return
        # The mean over processes: each decides the same, even for a metric logged without sync_dist.
        value = monitored_value(metrics[self.monitor], f"EarlyStopping(monitor={self.monitor!r})")
        current = self.last_score = agreed_mean(trainer, value)
        previous_best = self.best_score
        should_stop, message = self._evaluate_stopping_criteria(current)
        if self.verbose and self.best_score != previous_best and trainer.is_global_zero:
            print(f"EarlyStopping: {self.monitor} improved to {self.best_score:.6g} (epoch {trainer.current_epoch}).")
        if should_stop:
            trainer.should_stop = True
            self.stopped_epoch = int(trainer.current_epoch)
            self.stopping_reason_message = message
            accelerator = trainer.accelerator  # each process says it; its rank tells the lines apart
            rank = f"[rank: {accelerator.process_index}] " if accelerator.num_processes > 1 else ""
            log.info(f"{rank}EarlyStopping: {message} Stopping at epoch {trainer.current_epoch}.")

    def _evaluate_stopping_criteria(self, current: float) -> tuple[bool, str]:
        """Updates the counters with ``current``; returns (whether to stop, why in words), the reason kept in
        ``stopping_reason``."""
        reason, message = self._evaluate(current)
        if reason is not EarlyStoppingReason.NOT_STOPPED:
            self.stopping_reason = reason
        return reason is not EarlyStoppingReason.NOT_STOPPED, message

    def _evaluate(self, current: float) -> tuple[EarlyStoppingReason, str]:
        if self.check_finite and not math.isfinite(current):
            return EarlyStoppingReason.NON_FINITE_METRIC, f"{self.monitor} = {current} is not finite."
        better, sign = (float.__lt__, "<") if self.mode == "min" else (float.__gt__, ">")
        improved = better(current, self.best_score - self.min_delta if self.mode == "min"
                          else self.best_score + self.min_delta)
        if improved:
            self.best_score = current
            self.wait_count = 0
        if self.stopping_threshold is not None and better(current, self.stopping_threshold):
            return EarlyStoppingReason.STOPPING_THRESHOLD, (
                f"Stopping threshold reached: {self.monitor} = {current:.6g} {sign} {self.stopping_threshold}.")
        if self.divergence_threshold is not None and better(self.divergence_threshold, current):
            opposite = ">" if sign == "<" else "<"
            return EarlyStoppingReason.DIVERGENCE_THRESHOLD, (
                f"Divergence threshold reached: {self.monitor} = {current:.6g} {opposite} {self.divergence_threshold}.")
        if improved:
            return EarlyStoppingReason.NOT_STOPPED, ""
        self.wait_count += 1
        if self.wait_count >= self.patience:
            return EarlyStoppingReason.PATIENCE_EXHAUSTED, (
                f"{self.monitor} did not improve by more than {self.min_delta} for {self.wait_count} checks; "
                f"best {self.best_score:.6g}.")
        return EarlyStoppingReason.NOT_STOPPED, ""

    def state_dict(self) -> dict[str, Any]:
        # Scores go in a tensor: checkpoint JSON need not represent the initial +/-inf.
        return {"wait_count": self.wait_count, "stopped_epoch": self.stopped_epoch,
                "best_score": torch.tensor(self.best_score, dtype=torch.float64), "patience": self.patience,
                "last_score": torch.tensor(math.nan if self.last_score is None else self.last_score,
                                           dtype=torch.float64),  # a tensor as best_score; NaN stands for None
                "stopping_reason": self.stopping_reason.name, "stopping_reason_message": self.stopping_reason_message}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.wait_count = int(state_dict["wait_count"])
        self.stopped_epoch = int(state_dict["stopped_epoch"])
        self.best_score = monitored_value(state_dict["best_score"], "EarlyStopping")
        # Absent in checkpoints written before the reason was saved: not stopped.
        reason = state_dict.get("stopping_reason", EarlyStoppingReason.NOT_STOPPED.name)
        self.stopping_reason = reason if isinstance(reason, EarlyStoppingReason) else EarlyStoppingReason[reason]
        self.stopping_reason_message = state_dict.get("stopping_reason_message")
        last = monitored_value(state_dict.get("last_score", math.nan), "EarlyStopping")
        self.last_score = None if math.isnan(last) else last
        self._restored_stop = self._still_stops()  # the reason stays as saved (as Lightning's) until a new stop

    def _still_stops(self) -> bool:
        """Whether the restored stop stands under this callback's own settings (not the saved ones: a resume with a
        larger ``patience`` or another threshold is asked for on purpose). Lightning instead takes the saved
        ``patience`` and stops at the next check."""
        reason, last = self.stopping_reason, self.last_score
        if reason is EarlyStoppingReason.PATIENCE_EXHAUSTED:
            return self.wait_count >= self.patience
        if reason is EarlyStoppingReason.NON_FINITE_METRIC:
            return self.check_finite
        if reason is EarlyStoppingReason.NOT_STOPPED or last is None:  # None: saved before it was kept
            return reason is not EarlyStoppingReason.NOT_STOPPED
        better = float.__lt__ if self.mode == "min" else float.__gt__
        if reason is EarlyStoppingReason.STOPPING_THRESHOLD:
            return self.stopping_threshold is not None and better(last, self.stopping_threshold)
        return self.divergence_threshold is not None and better(self.divergence_threshold, last)

