"""``configure_optimizers``: parsing every accepted form, and stepping the LR schedulers it returns.

Owns: turning the return value into optimizers plus :class:`LRSchedulerConfig` objects (validated once), and the
rule for when a scheduler steps: ``interval="step"`` every ``frequency`` *applied* optimizer steps (an fp16 step
skipped for overflow neither counts nor steps a scheduler), ``interval="epoch"`` every ``frequency`` epochs;
``ReduceLROnPlateau`` gets the value of its ``monitor`` from ``trainer.callback_metrics``.
"""

from __future__ import annotations

import difflib
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from ..user_frame import user_stacklevel

# Built here from configure_optimizers, read and replaced by callbacks: defined below both (see its module).
from stoker.callbacks.scheduler_config import LRSchedulerConfig

_SCHEDULER_KEYS = ("scheduler", "interval", "frequency", "monitor", "strict", "name")
_TOP_KEYS = ("optimizer", "lr_scheduler", "monitor")


def _describe(value: Any) -> str:
    """A one-line sketch of a return value: ``(SGD, StepLR)``, ``{'optimizer': SGD}``."""
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_describe(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if isinstance(value, Mapping):
        return "{" + ", ".join(f"{k!r}: {_describe(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (str, int, float, type(None))):
        return repr(value)[:40]
    return type(value).__name__


class OptimizersError(TypeError, ValueError):
    """``configure_optimizers`` returned something that is not an accepted form: a ``TypeError``, and a
    ``ValueError`` too (the class of Lightning's ``MisconfigurationException`` that scripts catch for it)."""


class MonitorMissingError(RuntimeError, ValueError):
    """A ``ReduceLROnPlateau`` with ``strict=True`` watches a value that was not logged: a ``RuntimeError`` (the
    run is not where the value exists), and a ``ValueError`` too (a wrong ``monitor`` name is the usual cause, and
    the class of Lightning's ``MisconfigurationException`` that scripts catch for it)."""


def _bad_return(value: Any, detail: str = "") -> TypeError:
    lightning = "" if detail else "Unknown configuration for model optimizers. "  # a shape Lightning does not know
    return OptimizersError(
        f"{lightning}configure_optimizers() returned {_describe(value)}{detail}. Return an optimizer, "
        "(optimizer, scheduler), ([optimizers], [schedulers]) or {'optimizer': opt, 'lr_scheduler': sched | "
        "{'scheduler': sched, 'interval': 'step' | 'epoch', 'frequency': 1, 'monitor': 'val/loss'}}."
    )


def parse_optimizers(value: Any, manual: bool = False, own_step: bool = False
                     ) -> tuple[list[torch.optim.Optimizer], list[LRSchedulerConfig]]:
    """Returns ``(optimizers, scheduler_configs)`` for any accepted ``configure_optimizers`` return value.
    ``manual``: under manual optimization the module steps its schedulers itself, so a scheduler need not be
    torch's, and a ``ReduceLROnPlateau`` needs no ``monitor``. ``own_step``: the module overrides
    ``lr_scheduler_step``, so a scheduler of its own kind is stepped by it (Lightning's rule). ``None`` is an error (Lightning
    trains with no optimizer): a ``configure_optimizers`` that forgot its ``return`` fails at once rather than
    training nothing."""
    optimizers: list[torch.optim.Optimizer] = []
    configs: list[LRSchedulerConfig] = []
    if isinstance(value, torch.optim.Optimizer):
        optimizers.append(value)
    elif isinstance(value, Mapping):
        _parse_dict(value, optimizers, configs, manual, own_step)
    elif isinstance(value, (list, tuple)) and value:
        if len(value) == 2 and not isinstance(value[1], torch.optim.Optimizer) \
                and not (isinstance(value[1], Mapping) and "optimizer" in value[1]):
            opts, scheds = value
            for opt in opts if isinstance(opts, (list, tuple)) else [opts]:
                optimizers.append(_check_optimizer(opt, value))
            for sched in scheds if isinstance(scheds, (list, tuple)) else [scheds]:
                configs.append(_scheduler_config(sched, None, value, manual, own_step))
        else:
            for item in value:
                if isinstance(item, Mapping):
                    _parse_dict(item, optimizers, configs, manual, own_step)
                else:
                    optimizers.append(_check_optimizer(item, value))
    else:
        raise _bad_return(value)
    if not optimizers:
        raise _bad_return(value, ", which holds no optimizer")
    _check_attached(optimizers, configs)
    return optimizers, configs


def _check_attached(optimizers: list[torch.optim.Optimizer], configs: list[LRSchedulerConfig]) -> None:
    """A scheduler changes the learning rate of the optimizer it was built on: that one must be stepped too."""
    for config in configs:
        target = getattr(config.scheduler, "optimizer", None)
        if isinstance(target, torch.optim.Optimizer) and not any(target is opt for opt in optimizers):
            raise ValueError(
                "Some schedulers are attached with an optimizer that wasn't returned from `configure_optimizers`: "
                f"configure_optimizers() returned the scheduler {type(config.scheduler).__name__} built on a "
                f"{type(target).__name__} that is not one of the optimizers it returned, so nothing would step that "
                "optimizer. Build each scheduler on a returned optimizer, or return its optimizer too."
            )


def _check_optimizer(opt: Any, whole: Any) -> torch.optim.Optimizer:
    if not isinstance(opt, torch.optim.Optimizer):
        raise _bad_return(whole, f": {type(opt).__name__} is not a torch.optim.Optimizer")
    return opt


def _parse_dict(value: Mapping, optimizers: list, configs: list, manual: bool, own_step: bool) -> None:
    _check_keys(value, _TOP_KEYS, "configure_optimizers() dict")
    if "optimizer" not in value:
        raise _bad_return(value, " without an 'optimizer' key")
    optimizers.append(_check_optimizer(value["optimizer"], value))
    if value.get("lr_scheduler") is not None:
        configs.append(_scheduler_config(value["lr_scheduler"], value.get("monitor"), value, manual, own_step))


def _check_keys(value: Mapping, allowed: Sequence[str], what: str) -> None:
    for key in value:
        if key not in allowed:
            close = difflib.get_close_matches(str(key), allowed, n=1)
            hint = f" Did you mean {close[0]!r}?" if close else ""
            raise ValueError(f"{what} has an unknown key {key!r}.{hint} Allowed keys: {', '.join(allowed)}.")


def _scheduler_config(value: Any, monitor: str | None, whole: Any, manual: bool, own_step: bool = False
                      ) -> LRSchedulerConfig:
    if isinstance(value, Mapping):
        _check_keys(value, _SCHEDULER_KEYS, "the lr_scheduler dict")
        ignored = [key for key in value if key in ("monitor", "strict")]
        if manual and ignored:
            warnings.warn(f"The lr_scheduler dict sets {ignored}, but the keys will be ignored: under manual "
                          "optimization the module steps its schedulers itself (self.lr_schedulers().step(...)).",
                          RuntimeWarning, stacklevel=user_stacklevel())
        if "scheduler" not in value:
            raise ValueError('The lr scheduler dict must have the key "scheduler" with its item being an lr '
                             f"scheduler: the lr_scheduler dict {dict(value)!r} needs a 'scheduler' key holding the "
                             "scheduler.")
        config = LRSchedulerConfig(value["scheduler"], value.get("interval", "epoch"), value.get("frequency", 1),
                                   value.get("monitor", monitor), value.get("strict", True), value.get("name"))
    else:
        config = LRSchedulerConfig(value, monitor=monitor)
    from torch.optim.lr_scheduler import LRScheduler, ReduceLROnPlateau

    if not (manual or own_step) and not isinstance(config.scheduler, (LRScheduler, ReduceLROnPlateau)):
        raise _bad_return(whole, f": the scheduler {type(config.scheduler).__name__} is not a torch LR scheduler "
                                 "and doesn't follow PyTorch's LRScheduler API (a scheduler of another kind needs "
                                 "the module's own lr_scheduler_step to step it)")
    if config.interval not in ("step", "epoch"):
        raise ValueError(f'The "interval" key in lr scheduler dict must be "step" or "epoch" but is '
                         f'"{config.interval}": lr_scheduler interval={config.interval!r} is not an interval. Expected '
                         "'step' (optimizer steps) or 'epoch'.")
    freq = config.frequency
    if isinstance(freq, bool) or not isinstance(freq, int) or freq < 1:
        raise ValueError(f"lr_scheduler frequency={freq!r} must be an int >= 1.")
    if config.reduce_on_plateau and not config.monitor and not manual:
        raise ValueError("The lr scheduler dict must include a monitor when a `ReduceLROnPlateau` scheduler is used. "
                         "A ReduceLROnPlateau scheduler needs a metric to watch: return {'optimizer': opt, "
                         "'lr_scheduler': {'scheduler': sched, 'monitor': 'val/loss'}} with a name you self.log.")
    return config


def step_schedulers(metrics: Mapping[str, Any], configs: Sequence[LRSchedulerConfig], interval: str,
                    count: int, step: Callable[[Any, Any], None] | None = None, plateau: bool | None = None) -> None:
    """Steps the schedulers of ``interval`` whose frequency divides ``count`` (applied steps, or epochs done);
    ``metrics``: the Trainer's ``callback_metrics`` (what a ReduceLROnPlateau watches). ``step``: the module's
    ``lr_scheduler_step(scheduler, metric)`` when overridden; ``plateau``: only the ReduceLROnPlateau ones (True),
    only the others (False), or all (None)."""
    for config in configs:
        if config.interval != interval or count % config.frequency or \
                plateau is not None and config.reduce_on_plateau != plateau:
            continue
        if config.reduce_on_plateau:
            value = metrics.get(config.monitor)
            if value is None:
                available = sorted(metrics)
                if config.strict:
                    raise MonitorMissingError(
                        f"ReduceLROnPlateau conditioned on metric {config.monitor} which is not available. Available "
                        f"metrics are: {available}. (ReduceLROnPlateau watches {config.monitor!r}, which was not "
                        f"logged: self.log({config.monitor!r}, ...) it, or fix the 'monitor' name.)"
                    )
                warnings.warn(f"ReduceLROnPlateau conditioned on metric {config.monitor} which is not available but "
                              f"strict is set to `False`. Skipping learning rate update. ({config.monitor!r} not "
                              f"logged (have {available}); not stepped (strict=False).)",
                              RuntimeWarning, stacklevel=2)
                continue
            if step is None:
                config.scheduler.step(float(value))
            else:
                step(config.scheduler, float(value))
        elif step is None:
            config.scheduler.step()
        else:
            step(config.scheduler, None)

