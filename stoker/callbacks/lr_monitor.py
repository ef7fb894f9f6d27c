"""`LearningRateMonitor`: the learning rate of every param group, sent to the Trainer's loggers.

This module owns the metric names (``lr-{Optimizer}``, ``/pg{n}`` suffixes, scheduler names) and when
values are sampled. Reading ``param_group["lr"]`` is a Python float lookup: no device work. Values go
straight to ``trainer.loggers`` (main process only) at the optimizer step they apply to, and are also
kept in ``lrs`` for inspection.
"""

from __future__ import annotations

import warnings
from collections import defaultdict
from typing import Any

import torch

from stoker.callbacks.base import Callback, TrainerView

__all__ = ["LearningRateMonitor", "NoLoggerError"]

_INTERVALS = (None, "step", "epoch")


class NoLoggerError(RuntimeError, ValueError):
    """A LearningRateMonitor on a Trainer without loggers: a RuntimeError when fit starts, and a ValueError (the
    kind Lightning's ``MisconfigurationException`` is in stoker), since ``logger=False`` is the value to change."""


class LearningRateMonitor(Callback):
    """Logs the learning rate of each param group of each optimizer.

    Names (Lightning's): ``lr-{OptimizerClass}`` for a one-group optimizer; with several groups one name per group,
    ``lr-{OptimizerClass}/pg1``, ``/pg2``, ... (``/{group["name"]}`` when the group has a ``"name"``, also for a
    single group; two groups of one optimizer may not share a name). A second optimizer of the same class gets
    ``lr-{OptimizerClass}-1``; a scheduler configured with ``"name"`` replaces the ``lr-{OptimizerClass}`` prefix.
    Momentum and weight decay go under the learning rate's name plus ``-momentum`` / ``-weight_decay``
    (``lr-SGD-momentum``); the latest values are in ``last_momentum_values`` / ``last_weight_decay_values``, the
    learning rates' history in ``lrs`` (every name is in it, empty, from the start of training; when an optimizer
    gains a param group, e.g. from ``BaseFinetuning``, ``lr-SGD``'s history moves on under ``lr-SGD/pg1``). A fit
    resumed from a checkpoint logs what the uninterrupted one logged after it (an epoch start logged before a
    checkpoint inside that epoch is not logged again); ``lrs`` holds the values of this process's fit only.

    Args:
        logging_interval: ``"step"``: before every optimizer step, the values that step uses (thinned by the
            Trainer's ``log_every_n_steps``, like the loss; with several optimizers, as in a GAN, every
            ``log_every_n_steps`` of each optimizer's own steps); ``"epoch"``: at the start of each training epoch;
            ``None``: each optimizer at its scheduler's interval (``"step"`` or ``"epoch"``), optimizers without a
            scheduler per epoch.
        log_momentum: Also log ``momentum`` (or Adam's ``betas[0]``); an optimizer without either logs 0, with a
            ``RuntimeWarning`` once.
        log_weight_decay: Also log ``weight_decay``.

    Example:
        >>> from stoker import Trainer
        >>> lr_monitor = LearningRateMonitor(logging_interval="step")
        >>> trainer = Trainer(max_epochs=3, callbacks=[lr_monitor])  # doctest: +SKIP
        >>> trainer.fit(module, loader)                               # doctest: +SKIP
        >>> lr_monitor.lrs["lr-AdamW"][:3]                            # doctest: +SKIP
        [0.001, 0.00098, 0.00096]
    """

    def __init__(self, logging_interval: str | None = None, log_momentum: bool = False,
                 log_weight_decay: bool = False) -> None:
        if logging_interval not in _INTERVALS:
            raise ValueError(
                f"LearningRateMonitor(logging_interval={logging_interval!r}) is not an interval. "
                "Expected None, 'step' or 'epoch'."
            )
        self.logging_interval = logging_interval
        self.log_momentum = log_momentum
        self.log_weight_decay = log_weight_decay
        self.lrs: dict[str, list[float]] = defaultdict(list)
        self.last_momentum_values: dict[str, float | None] = {}
        self.last_weight_decay_values: dict[str, float | None] = {}
        self._warned_momentum = False
        # (optimizer, metric prefix, interval) for each optimizer, decided once at the start of training.
        self._targets: list[tuple[Any, str, str]] = []
        self._steps: list[int] = []  # optimizer steps taken by each target's optimizer (see on_train_start)
        self._restored_steps: list[int] | None = None  # those of a checkpoint, until training starts
        self._epoch_logged: int | None = None  # the epoch whose start was logged (a resume inside it: not again)

    @property
    def state_key(self) -> str:
        return self._generate_state_key(logging_interval=self.logging_interval)

    def setup(self, trainer: TrainerView, module: Any, stage: str) -> None:
        if stage == "fit":  # a new fit; a resumed one gets its values back from the checkpoint after setup
            self._restored_steps, self._epoch_logged = None, None

    def on_train_start(self, trainer: TrainerView, module: Any) -> None:
        # A debugging run (fast_dev_run) logs nothing anyway: the values are still kept in `lrs`, as in Lightning,
        # where such a run's loggers are replaced by a DummyLogger.
        if not trainer.loggers and not trainer.dry_run and trainer.is_global_zero:
            raise NoLoggerError(
                "Cannot use `LearningRateMonitor` callback with `Trainer` that has no logger. "
                "LearningRateMonitor has no logger to write to: the Trainer was built with logger=False. "
                "Pass logger=True (TensorBoard), a stoker Logger, or drop the callback."
            )
        self._targets = self._plan(trainer)
        # Every name gets its (empty) history now, as in Lightning, so ``lrs`` lists what will be logged.
        for optimizer, prefix, _ in self._targets:
            for name in _keys(optimizer, prefix):
                self.lrs.setdefault(name, [])
        # With several optimizers each counts its own steps for the log_every_n_steps cadence: they share
        # global_step, so one stepping right before another would never be due. A resume continues the saved
        # counts (a checkpoint without them: an even share of global_step).
        share = trainer.global_step // max(len(self._targets), 1)
        restored, self._restored_steps = self._restored_steps, None
        if restored is not None and len(restored) == len(self._targets):
            self._steps = restored
        else:
            self._steps = [share] * len(self._targets)

    def _plan(self, trainer: TrainerView) -> list[tuple[Any, str, str]]:
        configs = trainer.lr_scheduler_configs
        seen: dict[str, int] = defaultdict(int)
        targets = []
        for optimizer in trainer.optimizers:
            config = _config_for(optimizer, configs)
            class_name = type(optimizer).__name__
            prefix = getattr(config, "name", None) if config is not None else None
            if not prefix:
                prefix = f"lr-{class_name}"
                count = seen[prefix]
                seen[prefix] += 1
                if count:
                    prefix = f"{prefix}-{count}"
            _group_names(optimizer)  # refused now, before the first step, if two groups share a name
            interval = self.logging_interval or (getattr(config, "interval", "epoch") if config else "epoch")
            targets.append((optimizer, prefix, interval))
        return targets

    def on_train_epoch_start(self, trainer: TrainerView, module: Any) -> None:
        if trainer.current_epoch == self._epoch_logged:  # a resume inside this epoch: its start was logged before
            return
        self._log(trainer, "epoch")
        self._epoch_logged = trainer.current_epoch

    def on_before_optimizer_step(self, trainer: TrainerView, module: Any, optimizer: Any) -> None:
        # The values this update uses, at the step it will complete (the Trainer logs its loss at the same x).
        for index, (target, _, _) in enumerate(self._targets):
            if _same_optimizer(target, optimizer):
                self._steps[index] += 1
                # one optimizer counts in global_step (skipped fp16 steps too), so its points meet the loss's
                count = trainer.global_step + 1 if len(self._targets) == 1 else self._steps[index]
                if count % trainer.log_every_n_steps == 0:
                    self._log(trainer, "step", only=optimizer)
                return

    def state_dict(self) -> dict[str, Any]:
        return {"steps": list(self._steps), "epoch_logged": self._epoch_logged}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._restored_steps = [int(n) for n in state_dict.get("steps", [])]
        epoch = state_dict.get("epoch_logged")
        self._epoch_logged = None if epoch is None else int(epoch)

    def _log(self, trainer: TrainerView, interval: str, only: Any = None) -> None:
        values: dict[str, float] = {}
        for optimizer, prefix, target_interval in self._targets:
            if target_interval != interval:
                continue
            if only is not None and not _same_optimizer(optimizer, only):
                continue
            values.update(self._values(optimizer, prefix))
        if not values:
            return
        for name, value in values.items():
            if name.endswith("-momentum"):
                self.last_momentum_values[name] = value
            elif name.endswith("-weight_decay"):
                self.last_weight_decay_values[name] = value
            else:
                self._history(name).append(value)
            # As Lightning's: also a callback metric (ModelCheckpoint/EarlyStopping can watch it); a host tensor
            trainer.callback_metrics[name] = torch.tensor(value)
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics(values, step=trainer.global_step + 1)

    def _history(self, name: str) -> list[float]:
        """The values logged under ``name``. An optimizer that got a second param group (``BaseFinetuning`` thawing a
        layer) renames its first group from ``lr-SGD`` to ``lr-SGD/pg1``: that group's history moves with it."""
        if name.endswith("/pg1") and name not in self.lrs:
            earlier = name[: -len("/pg1")]
            if earlier in self.lrs:
                self.lrs[name] = self.lrs.pop(earlier)
        return self.lrs[name]

    def _values(self, optimizer: Any, prefix: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for group, key in zip(optimizer.param_groups, _keys(optimizer, prefix)):
            out[key] = float(group["lr"])
            if self.log_momentum:
                out[f"{key}-momentum"] = self._momentum(group)
            if self.log_weight_decay:
                out[f"{key}-weight_decay"] = float(group.get("weight_decay", 0.0))
        return out

    def _momentum(self, group: dict[str, Any]) -> float:
        momentum = group.get("momentum", group.get("betas", (None,))[0])
        if momentum is None and not self._warned_momentum:
            self._warned_momentum = True
            warnings.warn("LearningRateMonitor(log_momentum=True): some optimizers do not have momentum (neither "
                          "'momentum' nor 'betas' in their param groups); 0 is logged for them.", RuntimeWarning,
                          stacklevel=2)
        return float(momentum or 0.0)


def _keys(optimizer: Any, prefix: str) -> list[str]:
    """The learning rate's metric name of each param group of ``optimizer``."""
    groups = optimizer.param_groups
    given = _group_names(optimizer)
    names = [name or (f"pg{index + 1}" if len(groups) > 1 else "") for index, name in enumerate(given)]
    return [f"{prefix}/{name}" if name else prefix for name in names]


def _group_names(optimizer: Any) -> list[str | None]:
    """The ``"name"`` of each param group (None where unnamed); two groups may not share one."""
    names = [group.get("name") for group in optimizer.param_groups]
    given = [n for n in names if n]
    if len(set(given)) < len(given):
        kind = type(optimizer).__name__
        raise ValueError("A single `Optimizer` cannot have multiple parameter groups with identical `name` values. "
                         f"LearningRateMonitor: the param groups of {kind} share a name ({names}); give each group "
                         "its own 'name' so that each has its own metric.")
    return names


def _same_optimizer(a: Any, b: Any) -> bool:
    return a is b or a.param_groups is b.param_groups


def _config_for(optimizer: Any, configs: list[Any]) -> Any:
    """The scheduler config whose scheduler drives ``optimizer``, or ``None``."""
    for config in configs:
        scheduler = getattr(config, "scheduler", None)
        target = getattr(scheduler, "optimizer", None)
        if target is not None and _same_optimizer(optimizer, target):
            return config
    return None
