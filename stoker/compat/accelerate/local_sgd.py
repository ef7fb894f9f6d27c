"""Local SGD: each process trains its own copy of the model for a few steps without gradient synchronisation, then
the copies' parameters are averaged (Accelerate's ``accelerate.local_sgd.LocalSGD``; ``stoker.local_sgd`` too).

Communication drops from one all-reduce of the gradients per step to one all-reduce of the parameters every
``local_sgd_steps`` steps, at the cost of processes drifting apart in between.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from ...accelerator import Accelerator


class LocalSGD:
    """Context manager around the training loop: gradients are not synchronised inside it; every
    ``local_sgd_steps`` calls of :meth:`step`, and when the block ends, the processes' parameters are averaged.

    With one process (or ``enabled=False``) it does nothing. FSDP shards cannot be averaged this way: use DDP.

    Example:
        >>> with LocalSGD(accelerator=accelerator, model=model, local_sgd_steps=8) as local_sgd:
        ...     for batch in loader:
        ...         with accelerator.accumulate(model):
        ...             accelerator.backward(loss_fn(model(batch)))
        ...             optimizer.step(); optimizer.zero_grad()
        ...             local_sgd.step()
    """

    def __init__(self, accelerator: Accelerator, model: torch.nn.Module, local_sgd_steps: int,
                 enabled: bool = True) -> None:
        if getattr(accelerator.strategy, "shards_parameters", False):
            raise NotImplementedError("LocalSGD averages whole parameters, but FSDP shards them: use DDP "
                                      "(strategy='ddp') with LocalSGD.")
        if isinstance(local_sgd_steps, bool) or not isinstance(local_sgd_steps, int) or local_sgd_steps < 1:
            raise ValueError(f"LocalSGD(local_sgd_steps={local_sgd_steps!r}) must be an int >= 1: the number of "
                             "steps between two averagings of the parameters.")
        self.enabled = bool(enabled) and accelerator.num_processes > 1
        self.num_steps = 0
        self.accelerator = accelerator
        self.model = model
        self.local_sgd_steps = local_sgd_steps
        self._no_sync: contextlib.ExitStack | None = None

    def __enter__(self) -> LocalSGD:
        if self.enabled:
            self._no_sync = contextlib.ExitStack()
            self._no_sync.enter_context(self.accelerator.no_sync(self.model))
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self.enabled:
            try:
                self._average()
            finally:
                stack, self._no_sync = self._no_sync, None
                if stack is not None:
                    stack.close()

    def step(self) -> None:
        """Counts a step; every ``local_sgd_steps`` steps the processes' parameters are averaged (collective)."""
        self.num_steps += 1
        if self.enabled and self.num_steps % self.local_sgd_steps == 0:
            self._average()

    def _average(self) -> None:
        with torch.no_grad():
            for param in self.model.parameters():
                param.copy_(self.accelerator.reduce(param.detach(), reduction="mean"))
