"""Trial runs: short ``fit`` / ``validate`` / ``test`` / ``predict`` calls on the user's own Trainer and module,
after which everything they touched is as it was.

Owns what a trial may change and how it is put back. Kept aside and restored: the module's weights and buffers (a
CPU copy, so that the copy takes no accelerator memory from a batch-size trial), the global RNG states, the optimizer
step count and the Trainer's run attributes (callbacks, loggers, limits, options, loop, metrics, the objects of its
last fit). The module and data module stay attached to the Trainer, as after Lightning's tuner. During a trial the
user's callbacks, loggers, profiler and closing line are left out, no sanity check runs and no minimum of epochs or
steps holds; a non-finite loss warns instead of raising (a learning-rate sweep that diverges is expected to meet
one). Each trial starts at step 0 with a fresh loop position, as a first ``fit``. Not restored: what the module's
own hooks do to its other attributes, and callbacks returned by its ``configure_callbacks()``, which run in the
trial as in any fit.
"""

from __future__ import annotations

import dataclasses
import inspect
import warnings
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import torch

from ..accelerator import capture_rng_state, restore_rng_state
from ..trainer.loops import FitLoop
from ..trainer.nonfinite import NonFiniteLoss

if TYPE_CHECKING:
    from ..callbacks import Callback
    from ..trainer import Trainer, TrainingModule

# The Trainer's attributes a run replaces or fills: set back to these objects (dicts and lists with their contents
# as they were) after.
_KEPT = ("callbacks", "loggers", "profiler", "run_report", "max_steps", "max_epochs", "limit_train_batches",
         "limit_val_batches", "limit_test_batches", "limit_predict_batches", "options", "nonfinite", "fit_loop",
         "state", "should_stop", "prepared_optimizers", "optimizers", "lr_scheduler_configs", "fit_run", "hooks",
         "num_training_batches", "num_val_batches", "num_test_batches", "num_predict_batches", "callback_metrics",
         "logged_metrics", "progress_bar_values", "eval_log_steps", "results", "train_results")


# What keep_loaders() leaves in place: the last trial's loaders (the prepared ones are fit_run's).
_LOADERS = ("fit_run", "num_training_batches", "num_val_batches")


class _Silent:
    """Stands in for the Trainer's run report during a trial: a trial's end is not the end of the user's run."""

    def begin(self) -> None: ...

    def training_starts(self) -> None: ...

    def finish(self, fn: str, exception: BaseException | None) -> None: ...


class Trial:
    """Runs trials on ``trainer`` with ``module``; leaving the ``with`` block undoes them (module docstring).

    Example:
        >>> with Trial(trainer, module) as trial:                     # doctest: +SKIP
        ...     trial.run("fit", {"datamodule": dm}, callbacks=[], max_steps=3)
    """

    def __init__(self, trainer: Trainer, module: TrainingModule) -> None:
        self.trainer, self.module = trainer, module

    def __enter__(self) -> Trial:
        t = self.trainer
        self.kept = {n: getattr(t, n) for n in _KEPT}
        self.contents = {n: v.copy() for n, v in self.kept.items() if isinstance(v, (dict, list))}
        self.weights = {k: v.detach().to("cpu", copy=True) for k, v in self.module.state_dict().items()}
        self.rng = capture_rng_state()
        self.step, self.failed, self.kept_loaders = t.accelerator.step, False, False
        return self

    def run(self, fn: str, loaders: Mapping[str, Any], callbacks: list[Callback], **limits: Any) -> None:
        """One ``trainer.<fn>`` call on the module with ``loaders`` (its keyword arguments), ``callbacks`` in place
        of the user's and the Trainer attributes in ``limits`` (``max_steps=3``...) set for it."""
        t, kept = self.trainer, self.kept
        if self.failed:  # what the failed trial left (a half-open accumulation window, device memory) goes
            t.accelerator.free_memory()
        t.accelerator.step = 0
        t.callbacks, t.loggers, t.profiler, t.run_report = list(callbacks), [], None, _Silent()
        t.options = dataclasses.replace(kept["options"], min_epochs=None, min_steps=None, num_sanity_val_steps=0)
        t.nonfinite = NonFiniteLoss("warn", t.options.nonfinite_skip_limit)
        t.fit_loop, t.state = FitLoop(t), type(kept["state"])()  # a fresh state: a trial may run in a setup hook
        for name, value in limits.items():
            setattr(t, name, value)
        call = getattr(t, fn)
        if "verbose" in inspect.signature(call).parameters:  # stoker.Trainer's validate/test print a table
            loaders = {**loaders, "verbose": False}
        self.failed = True
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*was not finite", category=RuntimeWarning)
            call(self.module, **loaders)
        self.failed = False

    def keep_loaders(self, fn: str, loaders: Mapping[str, Any]) -> None:
        """Ends with a trial of no steps, whose loaders (asked for at the module's current settings) stay the
        Trainer's (``trainer.train_dataloader`` shows them, as after Lightning's search)."""
        if fn == "fit":
            self.run(fn, loaders, [], max_steps=0)
            run = self.trainer.fit_run  # a fit with nothing to train asks for no val loaders: asked for here
            if run is not None and run.val_enabled:
                self.trainer.run_setup.val_loaders(run)
            self.kept_loaders = True

    def __exit__(self, *exc_info: Any) -> None:
        t = self.trainer
        t.accelerator.free_memory()  # the trial's prepared objects and cached device memory go
        t.accelerator.step = self.step
        for name, value in self.kept.items():
            if self.kept_loaders and name in _LOADERS:
                continue
            setattr(t, name, value)
            if name in self.contents:  # the same object, with its contents as they were
                value.clear()
                value.update(self.contents[name]) if isinstance(value, dict) else value.extend(self.contents[name])
        with torch.no_grad():
            self.module.load_state_dict(self.weights)
        self.module.zero_grad(set_to_none=True)
        restore_rng_state(self.rng)


def stage_dataset_length(trainer: Trainer, fn: str) -> int | None:
    """The length of the dataset of the loader the last ``fn`` call was given (its first one), or None when it has
    none with a length (an iterable dataset, a combined loader)."""
    loaders = trainer.run_setup.stage_loaders.get("train" if fn == "fit" else fn) or [None]
    try:
        return len(loaders[0].dataset)
    except (AttributeError, TypeError):
        return None


def attribute_holders(module: TrainingModule, datamodule: Any, name: str) -> list[Any]:
    """Where the value ``name`` lives, in this order: the module, its ``hparams`` (a mapping, or any object that
    answers ``name in hparams``), the data module, its ``hparams`` (Lightning's lookup); the last one found is the
    value in force (the data module's, when both)."""
    holders: list[Any] = []
    for owner in (module, datamodule):
        if owner is None:
            continue
        if hasattr(owner, name):
            holders.append(owner)
        hparams = getattr(owner, "hparams", None)
        if hparams is not None and callable(getattr(hparams, "__contains__", None)) and name in hparams:
            holders.append(hparams)
    return holders


def set_attribute(holders: list[Any], name: str, value: Any) -> None:
    """Writes ``value`` to ``name`` in every holder found by :func:`attribute_holders`."""
    for holder in holders:
        if isinstance(holder, dict):
            holder[name] = value
        else:
            setattr(holder, name, value)


def check_count(argument: str, value: Any, least: int) -> None:
    """``value`` must be an int (TypeError) of at least ``least`` (ValueError); ``argument`` names it."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{argument} must be an int, got {value!r}.")
    if value < least:
        raise ValueError(f"{argument} must be >= {least}, got {value!r}.")
