"""`LearningRateMonitor`: the learning rate of every param group, sent to the Trainer's loggers.

This module owns the metric names (``lr-{Optimizer}``, ``/pg{n}`` suffixes, scheduler names) and when
values are sampled. Reading ``param_group["lr"]`` is a Python float lookup: no device work. Values go
straight to ``trainer.loggers`` (main process only) at the optimizer step they apply to, and are also
kept in ``lrs`` for inspection.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import torch

from stoker.callbacks.base import Callback, TrainerView

__all__ = ["LearningRateMonitor"]

_INTERVALS = (None, "step", "epoch")


class LearningRateMonitor(Callback):
    """Logs the learning rate of each param group of each optimizer.

    Names: ``lr-{OptimizerClass}`` for a one-group optimizer; with several groups one name per group,
    ``lr-{OptimizerClass}/pg1``, ``/pg2``, ... (or ``/{group["name"]}`` when the group has a ``"name"``).
    A second optimizer of the same class gets ``lr-{OptimizerClass}-1``; a scheduler configured with
    ``"name"`` replaces the ``lr-{OptimizerClass}`` prefix. The x-axis is the optimizer step
    (``trainer.global_step`` before the update, so step 0 is the first update).

    Args:
        logging_interval: ``"step"``: at every optimizer step (thinned by the Trainer's
            ``log_every_n_steps``, like the loss); ``"epoch"``: at the start of each training epoch; ``None``: each
            optimizer at its scheduler's interval (``"step"`` or ``"epoch"``), optimizers without a
            scheduler per epoch.
        log_momentum: Also log ``momentum`` (or Adam's ``betas[0]``) as ``momentum-{OptimizerClass}...``.
        log_weight_decay: Also log ``weight_decay`` as ``weight_decay-{OptimizerClass}...``.

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
        # (optimizer, metric prefix, interval) for each optimizer, decided once at the start of training.
        self._targets: list[tuple[Any, str, str]] = []

    @property
    def state_key(self) -> str:
        return self._generate_state_key(logging_interval=self.logging_interval)

    def on_train_start(self, trainer: TrainerView, module: Any) -> None:
        if not trainer.loggers and trainer.is_global_zero:
            raise RuntimeError(
                "LearningRateMonitor has no logger to write to: the Trainer was built with logger=False. "
                "Pass logger=True (TensorBoard), a stoker Logger, or drop the callback."
            )
        self._targets = self._plan(trainer)

    def _plan(self, trainer: TrainerView) -> list[tuple[Any, str, str]]:
        configs = trainer.lr_scheduler_configs
        seen: dict[str, int] = defaultdict(int)
        targets = []
        for optimizer in trainer.optimizers:
            config = _config_for(optimizer, configs)
            class_name = type(getattr(optimizer, "optimizer", optimizer)).__name__
            prefix = getattr(config, "name", None) if config is not None else None
            if not prefix:
                prefix = f"lr-{class_name}"
                count = seen[prefix]
                seen[prefix] += 1
                if count:
                    prefix = f"{prefix}-{count}"
            interval = self.logging_interval or (getattr(config, "interval", "epoch") if config else "epoch")
            targets.append((optimizer, prefix, interval))
        return targets

    def on_train_epoch_start(self, trainer: TrainerView, module: Any) -> None:
        self._log(trainer, "epoch")

    def on_before_optimizer_step(self, trainer: TrainerView, module: Any, optimizer: Any) -> None:
        # The step this update will complete; the Trainer logs its loss at the same x.
        if (trainer.global_step + 1) % trainer.log_every_n_steps == 0:
            self._log(trainer, "step", only=optimizer)

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
            self.lrs[name].append(value)
            # As Lightning's: also a callback metric (ModelCheckpoint/EarlyStopping can watch it); a host tensor
            trainer.callback_metrics[name] = torch.tensor(value)
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.log_metrics(values, step=trainer.global_step + 1)

    def _values(self, optimizer: Any, prefix: str) -> dict[str, float]:
        groups = optimizer.param_groups
        out: dict[str, float] = {}
        for index, group in enumerate(groups):
            suffix = "" if len(groups) == 1 else f"/{group.get('name') or f'pg{index + 1}'}"
            out[f"{prefix}{suffix}"] = float(group["lr"])
            tail = prefix[len("lr"):] if prefix.startswith("lr-") else f"-{prefix}"
            if self.log_momentum:
                momentum = group.get("momentum", group.get("betas", (None,))[0])
                if momentum is not None:
                    out[f"momentum{tail}{suffix}"] = float(momentum)
            if self.log_weight_decay and "weight_decay" in group:
                out[f"weight_decay{tail}{suffix}"] = float(group["weight_decay"])
        return out


def _same_optimizer(a: Any, b: Any) -> bool:
    return a is b or a.param_groups is b.param_groups


def _config_for(optimizer: Any, configs: list[Any]) -> Any:
    """The scheduler config whose scheduler drives ``optimizer``, or ``None``."""
    for config in configs:
        scheduler = getattr(config, "scheduler", None)
        scheduler = getattr(scheduler, "scheduler", scheduler)  # an AcceleratedScheduler wraps the real one
        target = getattr(scheduler, "optimizer", None)
        if target is not None and _same_optimizer(optimizer, target):
            return config
    return None
