"""The gradient-accumulation window: which micro-step updates the weights, and how its gradients are normalised.

The Accelerator holds one ``GradientWindow``, built with the precision and strategy it works with. It decides
``sync_gradients`` for each micro-step, what ``backward`` divides a loss by (the window's *true* length, so a short
last window is averaged over what it really holds), and finishes the gradients exactly once per optimizer per
step: it is the one place that knows whether a step's gradients were already unscaled (fp16) and normalised
(summed losses). It counts the optimizer steps that really happened.

Where a window ends: after ``steps`` micro-steps, or earlier at the last batch of the prepared loader being
iterated. With ``sync_with_dataloader = False`` a loader's end closes nothing: every window holds ``steps``
micro-steps, wherever the loaders end (one window may span two epochs, or two loaders), so ``backward`` divides by
``steps``, as Accelerate does. A window still open when training stops keeps its gradients (no optimizer step
uses them; ``save_state`` saves them with the open window, and the next ``accumulate`` continues it).

Summed losses (``backward(loss, num_items=n)``) under a loss scale (fp16): the scaler multiplies the loss by up
to 65536 before backward, and a *sum* over many items would overflow fp16 where the same mean loss does not. So
each summed loss is first divided by a normaliser fixed at the window's first backward: a power of two near the
items a process sees in a window (that micro-batch's count times the window length; averaged over processes so
that DDP averages gradients of one scale). Gradients stay near the magnitude of a mean loss; when the window
finishes they are multiplied once by ``normaliser * num_processes / total_items``. Scaling by a power of two is
exact in floating point, so the result is the same per-item mean. In full precision and bf16 nothing overflows:
summed losses are differentiated as they are, as before.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import torch

from .precision import Precision, iter_params

if TYPE_CHECKING:
    from ..data.loader import PreparedDataLoader
    from ..distributed.ddp import SingleDevice


class GradientWindow:
    """State of the current accumulation window (see the module docstring).

    Args:
        gradient_accumulation_steps: Micro-steps per optimizer step.
        precision: The Accelerator's precision (unscales; says whether losses are scaled).
        strategy: The Accelerator's strategy (process count and the all-reduce of item counts).
    """

    def __init__(self, gradient_accumulation_steps: int, precision: Precision, strategy: SingleDevice) -> None:
        self.steps = gradient_accumulation_steps
        # False: the end of a loader does not close the window (Accelerate's GradientAccumulationPlugin(
        # sync_with_dataloader=False)); a setting, like ``steps``, so ``reset`` keeps it.
        self.sync_with_dataloader = True
        self.precision = precision
        self.strategy = strategy
        self.reset()

    def reset(self) -> None:
        """Back to no window open and no step taken (``free_memory``); the length is kept."""
        self.sync_gradients = True
        self.micro_step = 0  # position in the current window (1-based once inside)
        self.in_window = False  # the current gradients belong to an accumulate() window
        self.divisor = 1  # what backward divides the loss by in this window
        self.items: Any = None  # summed item counts of the window (backward(num_items=...))
        self.normaliser: torch.Tensor | None = None  # fp16: what this window's summed losses were divided by
        self.done = False  # gradients were finished for a step; the next backward starts afresh
        self.finished: set[int] = set()  # ids of the optimizers whose gradients were finished (unscaled) this step
        self.factor: torch.Tensor | None = None
        self.uncounted_backward = False
        self.optimizer_steps = 0  # applied optimizer steps (skipped fp16 steps excluded)

    def begin_micro_step(self, loader: Any) -> None:
        """Opens the next micro-step; ``loader`` is the prepared loader being iterated (or None)."""
        steps = self.steps
        if steps == 1:  # every micro-step is a whole window: the common case, kept to a few attribute writes
            self.micro_step = 1
            self.sync_gradients = self.in_window = True
            # new_gradients(), inlined: this runs every step (benchmarks/step_calls.py counts the calls)
            self.done = False
            self.finished.clear()
            self.items = self.normaliser = None
            return
        if self.sync_gradients:  # the previous window closed: this micro-step opens a new one
            self.micro_step = 0
            self.new_gradients()
        self.micro_step += 1
        if loader is not None and self.sync_with_dataloader:
            end, remaining = loader.end_of_dataloader, loader.remaining_batches
        else:  # no loader, or windows that run across loader ends: every window holds `steps` micro-steps
            end, remaining = False, None
        self.sync_gradients = end or self.micro_step >= steps
        self.in_window = True
        done = self.micro_step - 1
        self.divisor = done + min(steps - done, remaining) if remaining is not None else steps

    def loss_for_backward(self, loss: torch.Tensor, num_items: int | torch.Tensor | None) -> torch.Tensor:
        """The loss to differentiate: divided by the window length, or its item count recorded when summed."""
        if self.done:
            self.new_gradients()
        if not self.in_window:  # backward outside accumulate(): Accelerate divides by the configured steps
            self.divisor = self.steps
        self.uncounted_backward = True
        if num_items is not None:
            # float32 whatever the default dtype (a true precision's steps make it bf16, which rounds counts > 256)
            count = num_items if isinstance(num_items, torch.Tensor) else torch.tensor(num_items, dtype=torch.float32)
            self.items = count if self.items is None else self.items + count
            if not self.precision.scales_loss:
                return loss  # full precision and bf16: differentiated as summed, normalised when finished
            if self.normaliser is None:
                self.normaliser = self._normaliser(count)
            return loss / self.normaliser
        return loss / self.divisor if self.divisor > 1 else loss

    def _normaliser(self, count: torch.Tensor) -> torch.Tensor:
        """The power of two at or below the items of a window at this micro-batch's rate, equal on every process."""
        per_window = count.detach().to(torch.float32) * self.divisor
        if self.strategy.num_processes > 1:  # DDP averages gradients: every process must divide by the same value
            per_window = self.strategy.all_reduce(per_window.to(self.strategy.device), "mean")
        per_window = per_window.clamp_min(1.0)
        mantissa, _ = torch.frexp(per_window)  # per_window = mantissa * 2**e, mantissa in [0.5, 1)
        return per_window / (2 * mantissa)  # exactly 2**(e-1): a correctly rounded division by an exact value

    def new_gradients(self) -> None:
        self.done = False
        self.finished.clear()
        self.items = None
        self.normaliser = None

    def finish(self, optimizer: torch.optim.Optimizer) -> None:
        """Once per optimizer per step: unscale fp16 gradients and apply the window's normalisation."""
        if self.done and id(optimizer) in self.finished:
            return
        if not self.done:
            self.done = True
            # Without summed losses or accumulation there is nothing to rescale: skip the call (hot path).
            needs_factor = self.items is not None or self.steps > 1
            self.factor = self._factor() if needs_factor else None
        self.finished.add(id(optimizer))
        self.precision.unscale_(optimizer)  # a no-op without a loss scale
        if self.factor is not None:
            grads = [p.grad for p in iter_params(optimizer) if p.grad is not None]
            if grads:
                torch._foreach_mul_(grads, self.factor.to(grads[0].device))

    def _factor(self) -> torch.Tensor | None:
        strategy = self.strategy
        if self.items is not None:  # summed losses: divide by every process's items of this window
            total = strategy.all_reduce(self.items.to(strategy.device, torch.float32), "sum")
            factor = strategy.num_processes / total.clamp_min(1)
            # A power of two: multiplying back is exact, so fp16 gives the same per-item mean as full precision.
            return factor if self.normaliser is None else factor * self.normaliser.to(factor.device)
        if self.in_window and self.divisor != self.micro_step and self.steps > 1:
            # A loader of unknown length ended the window early: rescale from the assumed to the true length.
            return torch.tensor(self.divisor / self.micro_step, dtype=torch.float32)
        return None

    def optimizer_stepped(self, stepped: bool) -> None:
        if stepped and self.uncounted_backward:
            self.optimizer_steps += 1
            self.uncounted_backward = False

    # -- checkpoints ------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, int]:
        """The counters every process shares (saved once, as JSON)."""
        return {"step": self.optimizer_steps, "micro_step": 0 if self.sync_gradients else self.micro_step}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.optimizer_steps = int(state["step"])
        self.micro_step = int(state.get("micro_step", 0))
        self.sync_gradients = self.micro_step == 0
        self.in_window = self.micro_step > 0
        self.new_gradients()

    def open_window_state(self) -> dict[str, torch.Tensor] | None:
        """This process's part of an open window that summed losses (its item count so far, and the normaliser
        its gradients were divided by); None when there is nothing to keep. Saved per process beside the open
        window's gradients."""
        if self.sync_gradients or self.items is None:
            return None
        state = {"items": self.items.detach().reshape(())}
        if self.normaliser is not None:
            state["normaliser"] = self.normaliser.detach().reshape(())
        return state

    def load_open_window_state(self, state: dict[str, torch.Tensor]) -> None:
        """Restores :meth:`open_window_state` (after :meth:`load_state_dict` reopened the window)."""
        self.items = state["items"].clone()
        normaliser = state.get("normaliser")
        self.normaliser = None if normaliser is None else normaliser.clone()


class MicroStep:
    """The context manager ``Accelerator.accumulate()`` returns: opens the window's next micro-step and, unless it
    closes the window, turns the models' cross-process gradient sync off for the block.

    A plain class rather than ``@contextlib.contextmanager``: a generator-based context costs about a microsecond
    more per micro-step, which shows on small models (see ``benchmarks/overhead.py``).

    Args:
        window: The Accelerator's window.
        loaders: The prepared loaders being iterated, innermost last (a live list: read on entry).
        strategy: Turns gradient sync off (``no_sync``) on the models of a micro-step that does not close the window.
        models: The models of this block.
        sync_each_batch: Sync gradients on every micro-step anyway (saves memory, costs communication).
    """

    __slots__ = ("window", "loaders", "strategy", "models", "sync_each_batch", "_stack")

    def __init__(self, window: GradientWindow, loaders: list[PreparedDataLoader], strategy: SingleDevice,
                 models: tuple[torch.nn.Module, ...], sync_each_batch: bool = False) -> None:
        self.window = window
        self.loaders = loaders
        self.strategy = strategy
        self.models = models
        self.sync_each_batch = sync_each_batch
        self._stack: contextlib.ExitStack | None = None

    def __enter__(self) -> None:
        loaders, window = self.loaders, self.window
        window.begin_micro_step(loaders[-1] if loaders else None)
        if window.sync_gradients or not self.strategy.is_distributed or not self.models or self.sync_each_batch:
            return
        stack = contextlib.ExitStack()
        try:
            for model in self.models:
                stack.enter_context(self.strategy.no_sync(model))
        except BaseException:
            stack.close()
            raise
        self._stack = stack

    def __exit__(self, *exc_info: Any) -> bool:
        stack, self._stack = self._stack, None
        return bool(stack.__exit__(*exc_info)) if stack is not None else False
