"""The Trainer options that came from Lightning and change how a run goes, beyond the loop's own arguments.

Owns: ``fast_dev_run`` (n batches of training and validation, no checkpoints, no loggers), ``min_epochs`` /
``min_steps`` (a stop request waits for them), ``max_time`` (a ``Timer`` callback), ``num_sanity_val_steps`` (a
short validation before training), ``reload_dataloaders_every_n_epochs``, ``detect_anomaly``, ``benchmark``,
``float32_matmul_precision``, ``use_distributed_sampler``. The argument checks are in ``args.py``.
"""

from __future__ import annotations

import contextlib
import warnings
from typing import Any

import torch

from . import args as check
from .stages import TRAIN, VALIDATE


def apply(trainer: Any, *, min_epochs: Any, min_steps: Any, max_time: Any, fast_dev_run: Any,
          num_sanity_val_steps: Any, detect_anomaly: Any, benchmark: Any, reload_dataloaders_every_n_epochs: Any,
          use_distributed_sampler: Any, float32_matmul_precision: Any) -> dict[str, Any]:
    """Sets the options on ``trainer``; returns overrides for the callbacks/loggers it builds next."""
    t = trainer
    t.min_epochs = check.optional_int("min_epochs", min_epochs, 0)
    t.min_steps = check.optional_int("min_steps", min_steps, 0, none_aliases=(-1,))
    t.max_time = check.max_time(max_time)
    t.fast_dev_run = check.fast_dev_run(fast_dev_run)
    t.num_sanity_val_steps = check.sanity_steps(num_sanity_val_steps)
    t.detect_anomaly = check.flag("detect_anomaly", detect_anomaly)
    t.benchmark = check.flag("benchmark", benchmark, allow_none=True)
    t.reload_dataloaders_every_n_epochs = check.optional_int(
        "reload_dataloaders_every_n_epochs", reload_dataloaders_every_n_epochs, 0) or 0
    t.use_distributed_sampler = check.flag("use_distributed_sampler", use_distributed_sampler)
    t.float32_matmul_precision = check.matmul_precision(float32_matmul_precision)
    overrides: dict[str, Any] = {}
    if t.fast_dev_run:  # Lightning's debugging run: n batches everywhere, one epoch, nothing written
        n = t.fast_dev_run
        t.limit_train_batches = t.limit_val_batches = t.limit_test_batches = t.limit_predict_batches = n
        t.max_steps, t.max_epochs, t.num_sanity_val_steps = n, 1, 0
        t.val_check_interval, t.check_val_every_n_epoch, t.max_time = 1.0, 1, None
        overrides.update(enable_checkpointing=False, logger=False)
    if t.benchmark is not None:
        torch.backends.cudnn.benchmark = t.benchmark
    elif t.deterministic:
        torch.backends.cudnn.benchmark = False  # Lightning's rule: deterministic runs do not autotune
    if t.float32_matmul_precision is not None:
        torch.set_float32_matmul_precision(t.float32_matmul_precision)
    return overrides


def add_timer(callbacks: list[Any], max_time: Any) -> list[Any]:
    """``max_time``: a ``Timer(duration=max_time)`` unless the user gave a ``Timer`` (theirs is kept, as in
    Lightning, with a warning)."""
    if max_time is None:
        return callbacks
    from ..callbacks import Timer

    if any(isinstance(c, Timer) for c in callbacks):
        warnings.warn("Trainer(max_time=...) was passed together with a Timer callback; the Timer callback's "
                      "duration is used.", stacklevel=3)
        return callbacks
    return [*callbacks, Timer(duration=max_time, interval="step")]


def min_reached(trainer: Any) -> bool:
    """Whether ``min_epochs`` and ``min_steps`` allow the run to stop now."""
    t = trainer
    if t.min_steps is not None and t.global_step < t.min_steps:
        return False
    return t.min_epochs is None or t.fit_loop.epoch >= t.min_epochs


def stop_requested(trainer: Any) -> bool:
    """``should_stop``, once ``min_epochs``/``min_steps`` allow it (until then the request waits, as in
    Lightning: the flag stays set and the run stops at the first point where the minimums are met)."""
    if not trainer.should_stop:
        return False
    if min_reached(trainer):
        return True
    if not getattr(trainer, "_min_warned", False):
        trainer._min_warned = True
        warnings.warn(f"Trainer was asked to stop at global_step {trainer.global_step} (epoch "
                      f"{trainer.current_epoch}), but min_epochs={trainer.min_epochs} / min_steps={trainer.min_steps} "
                      "are not reached yet; training goes on until they are.", stacklevel=2)
    return False


def anomaly_context(trainer: Any) -> contextlib.AbstractContextManager:
    """``detect_anomaly=True``: ``fit`` runs under ``torch.autograd.detect_anomaly`` (slow; for debugging)."""
    if trainer.detect_anomaly:
        return torch.autograd.detect_anomaly(check_nan=True)
    return contextlib.nullcontext()


def run_sanity_check(trainer: Any, run: Any) -> None:
    """``num_sanity_val_steps``: that many batches of each val loader before training (not logged, RNG states
    restored after, skipped on resume), with ``on_sanity_check_start``/``_end`` around it."""
    t = trainer
    steps = t.num_sanity_val_steps
    if not run.val_enabled or steps == 0 or t.global_step > 0 or t.fit_loop.epoch > 0:
        return
    from ..accelerator import capture_rng_state, restore_rng_state
    from .evaluation import run_evaluation

    states = capture_rng_state()
    loaders = run.val_loaders
    limits = [loader.max_batches for loader in loaders]
    t._sanity_checking, t.state.stage = True, VALIDATE.name
    try:
        for loader, n in zip(loaders, t.num_val_batches):
            loader.limit_batches(None if steps is None else int(min(steps, n)))
        t._hooks.call("on_sanity_check_start")
        t._send_to_loggers = lambda values: None
        run_evaluation(t, VALIDATE.name, loaders)
        t._hooks.call("on_sanity_check_end")
    finally:
        t.__dict__.pop("_send_to_loggers", None)
        t._sanity_checking, t.state.stage = False, TRAIN.name
        for loader, limit in zip(loaders, limits):
            loader.limit_batches(limit)
        restore_rng_state(states)
        t.callback_metrics.clear()
        t.logged_metrics.clear()
        t.progress_bar_metrics.clear()


def report(trainer: Any, fn: str, verbose: Any, results: list[dict[str, float]]) -> list[dict[str, float]]:
    """``verbose=True`` on ``validate``/``test``: prints each loader's metrics on the main process."""
    if not isinstance(verbose, bool):
        raise TypeError(f"Trainer.{fn}(verbose={verbose!r}) must be True or False.")
    if verbose and trainer.is_global_zero:
        for i, values in enumerate(results):
            title = f"{fn} metrics" + (f" (dataloader {i})" if len(results) > 1 else "")
            width = max([len(title), *(len(k) for k in values)])
            print(title)
            for name, value in sorted(values.items()):
                print(f"  {name:<{width}}  {value:.6g}")
    return results
