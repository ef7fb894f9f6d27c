"""Optimizer and scheduler wrappers that act only on the micro-steps that update weights."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch

from .torch_shortcuts import zero_grad

if TYPE_CHECKING:
    from .precision import Precision
    from .window import GradientWindow


def _of_wrapped(name: str) -> Any:
    """A property that reads and writes the wrapped optimizer's attribute ``name``."""
    return property(lambda self: getattr(self.optimizer, name),
                    lambda self, value: setattr(self.optimizer, name, value))


class AcceleratedOptimizer(torch.optim.Optimizer):
    """Wraps an optimizer so that ``step``/``zero_grad`` happen only when gradients are synchronised.

    On a sync micro-step, ``step`` first finishes the gradients once (fp16 unscale, window normalisation for
    summed losses), then steps through the precision object, which skips the step on fp16 overflow.

    Example:
        >>> model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters()))
        >>> optimizer.step()  # a no-op inside an accumulation window until its last micro-batch
    """

    # Deliberately no super().__init__: param_groups, state and defaults are the wrapped optimizer's own.
    def __init__(self, optimizer: torch.optim.Optimizer, window: GradientWindow, precision: Precision) -> None:
        self.optimizer = optimizer
        self._window = window
        self._precision = precision
        self.step_was_skipped = False  # True when the last step was skipped because fp16 gradients overflowed

    param_groups = _of_wrapped("param_groups")
    state = _of_wrapped("state")
    defaults = _of_wrapped("defaults")

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self.optimizer.add_param_group(param_group)

    # step/zero_grad/scheduler.step run every micro-step: they read the window's attributes directly rather
    # than through properties (a Python call each), which shows on small models (benchmarks/overhead.py).
    def zero_grad(self, set_to_none: bool = True) -> None:
        if not self._window.sync_gradients:
            return
        if set_to_none:
            zero_grad(self.optimizer)
        else:
            self.optimizer.zero_grad(set_to_none=False)

    def step(self, closure: Callable | None = None, **kwargs: Any) -> None:  # type: ignore[override]
        """Steps the wrapped optimizer at a window's last micro-step; ``closure`` and ``kwargs`` go to its ``step``
        (under fp16 loss scaling through the scaler, which takes no closure)."""
        window = self._window
        if not window.sync_gradients:
            return
        window.finish(self.optimizer)  # unscale + normalise, unless clipping already did (the window knows)
        # fp16: the scaler skips the step on overflow
        stepped = self._precision.step(self.optimizer, closure, **kwargs)
        self.step_was_skipped = not stepped
        window.optimizer_stepped(stepped)

    def count_next_step(self) -> None:
        """Counts this optimizer's next applied step in ``Accelerator.step`` even when no backward ran since the
        last counted step (several optimizers stepping on one backward each count: the Trainer's manual
        optimization rule). A step skipped for fp16 overflow still does not count."""
        self._window.uncounted_backward = True

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state_dict)

    def train(self) -> None:  # schedule-free optimizers have train()/eval(); pass them through
        if hasattr(self.optimizer, "train"):
            self.optimizer.train()

    def eval(self) -> None:
        if hasattr(self.optimizer, "eval"):
            self.optimizer.eval()

    def __getstate__(self) -> dict[str, Any]:
        return self.__dict__.copy()

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)

    def __repr__(self) -> str:
        return f"AcceleratedOptimizer({self.optimizer!r})"


class AcceleratedScheduler:
    """Wraps an LR scheduler so that it steps only when its optimizers really stepped.

    In several processes it steps ``num_processes`` times per optimizer step unless ``split_batches=True`` (a
    schedule written for one process then spans the same number of samples), as in Accelerate.

    Example:
        >>> optimizer, scheduler = accelerator.prepare(optimizer, torch.optim.lr_scheduler.LambdaLR(optimizer, f))
        >>> scheduler.step()  # no-op on micro-steps that did not update weights, and after a skipped fp16 step
    """

    def __init__(
        self,
        scheduler: Any,
        optimizers: list[AcceleratedOptimizer],
        window: GradientWindow,
        strategy: Any,
        step_with_optimizer: bool = True,
        split_batches: bool = False,
    ) -> None:
        self.scheduler = scheduler
        self.optimizers = optimizers
        self._window = window
        self._strategy = strategy
        self.step_with_optimizer = step_with_optimizer
        self.split_batches = split_batches

    def step(self, *args: Any, **kwargs: Any) -> None:
        if not self.step_with_optimizer:
            self.scheduler.step(*args, **kwargs)
            return
        if not self._window.sync_gradients:
            return
        for opt in self.optimizers:  # a loop, not any(<generator>): this runs every step
            if opt.step_was_skipped:
                return
        processes = self._strategy.num_processes
        if self.split_batches or processes == 1:
            self.scheduler.step(*args, **kwargs)
            return
        for _ in range(processes):
            self.scheduler.step(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:  # get_last_lr, state_dict, ...: the scheduler's own
        if name == "scheduler":  # not yet set (during unpickling): avoid infinite recursion
            raise AttributeError(name)
        return getattr(self.scheduler, name)

    def __repr__(self) -> str:
        return f"AcceleratedScheduler({self.scheduler!r})"
