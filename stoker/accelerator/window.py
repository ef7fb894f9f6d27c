"""The gradient-accumulation window: which micro-step updates the weights, and how its gradients are normalised.

The Accelerator holds one ``GradientWindow``. It decides ``sync_gradients`` for each micro-step, what ``backward``
divides a loss by (the window's *true* length, so a short last window is averaged over what it really holds),
and finishes the gradients exactly once per optimizer per step (fp16 unscale, per-item normalisation of summed
losses). It counts the optimizer steps that really happened.
"""

from __future__ import annotations

from typing import Any

import torch

from .precision import Precision, iter_params


class GradientWindow:
    """State of the current accumulation window (see the module docstring)."""

    def __init__(self, gradient_accumulation_steps: int) -> None:
        self.steps = gradient_accumulation_steps
        self.sync_gradients = True
        self.micro_step = 0  # position in the current window (1-based once inside)
        self.in_window = False  # the current gradients belong to an accumulate() window
        self.divisor = 1  # what backward divides the loss by in this window
        self.items: Any = None  # summed item counts of the window (backward(num_items=...))
        self.done = False  # gradients were finished for a step; the next backward starts afresh
        self.finished: set[int] = set()
        self.factor: torch.Tensor | None = None
        self.uncounted_backward = False
        self.optimizer_steps = 0  # applied optimizer steps (skipped fp16 steps excluded)

    def begin_micro_step(self, loader: Any) -> None:
        """Opens the next micro-step; ``loader`` is the prepared loader being iterated (or None)."""
        steps = self.steps
        if steps == 1:  # every micro-step is a whole window: the common case, kept to a few attribute writes
            self.micro_step = 1
            self.sync_gradients = self.in_window = True
            self.new_gradients()
            return
        if self.sync_gradients:  # the previous window closed: this micro-step opens a new one
            self.micro_step = 0
            self.new_gradients()
        self.micro_step += 1
        end = loader is not None and loader.end_of_dataloader
        self.sync_gradients = end or self.micro_step >= steps
        self.in_window = True
        done = self.micro_step - 1
        remaining = loader.remaining_batches if loader is not None else None
        self.divisor = done + min(steps - done, remaining) if remaining is not None else steps

    def loss_for_backward(self, loss: torch.Tensor, num_items: int | torch.Tensor | None) -> torch.Tensor:
        """The loss to differentiate: divided by the window length, or its item count recorded when summed."""
        if self.done:
            self.new_gradients()
        if not self.in_window:  # backward outside accumulate(): Accelerate divides by the configured steps
            self.divisor = self.steps
        self.uncounted_backward = True
        if num_items is not None:
            count = num_items if isinstance(num_items, torch.Tensor) else torch.tensor(float(num_items))
            self.items = count if self.items is None else self.items + count
            return loss
        return loss / self.divisor if self.divisor > 1 else loss

    def new_gradients(self) -> None:
        self.done = False
        self.finished.clear()
        self.items = None

    def finish(self, optimizer: torch.optim.Optimizer, precision: Precision, strategy: Any) -> None:
        """Once per optimizer per step: unscale fp16 gradients and apply the window's normalisation."""
        if self.done and id(optimizer) in self.finished:
            return
        if not self.done:
            self.done = True
            # Without summed losses or accumulation there is nothing to rescale: skip the call (hot path).
            needs_factor = self.items is not None or self.steps > 1
            self.factor = self._factor(strategy) if needs_factor else None
        self.finished.add(id(optimizer))
        precision.unscale_(optimizer)
        if self.factor is not None:
            grads = [p.grad for p in iter_params(optimizer) if p.grad is not None]
            if grads:
                torch._foreach_mul_(grads, self.factor.to(grads[0].device))

    def _factor(self, strategy: Any) -> torch.Tensor | None:
        if self.items is not None:  # summed losses: divide by every process's items of this window
            total = strategy.all_reduce(self.items.to(strategy.device, torch.float32), "sum")
            return strategy.num_processes / total.clamp_min(1)
        if self.in_window and self.divisor != self.micro_step and self.steps > 1:
            # A loader of unknown length ended the window early: rescale from the assumed to the true length.
            return torch.tensor(self.divisor / self.micro_step)
        return None

    def optimizer_stepped(self, stepped: bool) -> None:
        if stepped and self.uncounted_backward:
            self.optimizer_steps += 1
            self.uncounted_backward = False

    def state_dict(self) -> dict[str, int]:
        return {"step": self.optimizer_steps, "micro_step": 0 if self.sync_gradients else self.micro_step}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.optimizer_steps = int(state["step"])
        self.micro_step = int(state.get("micro_step", 0))
        self.sync_gradients = self.micro_step == 0
        self.in_window = self.micro_step > 0
