"""One training batch under automatic optimization, with the Trainer's and the module's step hooks in Lightning's
order::

    training_step
    [a window's first batch] on_before_zero_grad(opt) -> optimizer_zero_grad(epoch, batch_idx, opt)
    on_before_backward(loss) -> backward(loss) -> on_after_backward()
    [the window is complete] on_before_optimizer_step(opt) -> configure_gradient_clipping(opt, ...)
                             -> optimizer_step(epoch, batch_idx, opt, closure) -> schedulers stepped per step
    ... the batch's end hooks and the validation due after it ... -> ReduceLROnPlateau schedulers stepped per step

The step-interval ``ReduceLROnPlateau`` schedulers wait, as in Lightning, until the validation due after the batch has
run (they may watch one of its values): the loop calls :func:`step_plateau_schedulers` then.

Owns: that order and the Trainer's direct path for every module hook that is not overridden (looked up once per
epoch: such a hook costs nothing per batch). Does not own: when a window closes (the Accelerator), the batch loop,
or scheduler configs (``loops.py``, ``optim.py``).
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

import torch

from .hooks import overrides
from .losses import no_grad_error, unpack_loss
from .optim import step_schedulers

if TYPE_CHECKING:
    from .parts import TrainerParts
    from .run import FitRun


def clip_settings(trainer: TrainerParts) -> dict[str, Any]:
    """The Trainer's clipping settings as ``configure_gradient_clipping``'s keywords (None: no clipping); Lightning's
    ``trainer.gradient_clip_val`` / ``gradient_clip_algorithm`` read them too."""
    if trainer.clip_grad_norm is not None:
        return {"gradient_clip_val": trainer.clip_grad_norm, "gradient_clip_algorithm": "norm"}
    if trainer.clip_grad_value is not None:
        return {"gradient_clip_val": trainer.clip_grad_value, "gradient_clip_algorithm": "value"}
    return {"gradient_clip_val": None, "gradient_clip_algorithm": None}


def _requires_closure(optimizer: Any) -> bool:
    """Whether ``optimizer.step`` needs a closure that evaluates the loss again (``torch.optim.LBFGS``)."""
    try:
        closure = inspect.signature(optimizer.step).parameters.get("closure")
    except (TypeError, ValueError):  # a step without a readable signature: stepped without a closure
        return False
    return closure is not None and closure.default is inspect.Parameter.empty


def _check_closure_run(trainer: TrainerParts, optimizers: list[Any]) -> None:
    """An optimizer that evaluates the loss again inside its step needs one batch per step and unscaled losses."""
    name = type(optimizers[0]).__name__
    if trainer.accelerator.gradient_accumulation_steps > 1:
        raise ValueError(f"{name} evaluates the loss again inside its step, on the window's last batch only, so it "
                         "cannot accumulate gradients over micro-batches: use accumulate=1 (or a larger batch).")
    if trainer.accelerator.precision.scales_loss:  # its new gradients would stay scaled: the scaler unscaled before
        raise ValueError(f"{name} evaluates the loss again inside its step, which fp16's loss scaling cannot "
                         "follow: use precision='bf16' or 'fp32' with it.")


def _own(module: object, name: str) -> Any:
    """The module's override of step hook ``name``, or None (the Trainer then does the default itself)."""
    return getattr(module, name) if overrides(module, name) else None


def step_plateau_schedulers(trainer: TrainerParts, interval: str, count: int) -> None:
    """The ``ReduceLROnPlateau`` schedulers of ``interval`` (``count``: steps applied, or epochs done), once the
    values they may watch exist: a step's after the validation due at its batch (module docstring), an epoch's
    after the epoch's end hooks."""
    step_schedulers(trainer.callback_metrics, trainer.lr_scheduler_configs, interval, count,
                    _own(trainer.module, "lr_scheduler_step"), plateau=True)


class AutomaticStep:
    """The training step of one epoch: ``step(batch, batch_idx)`` runs forward and backward, then
    :meth:`optimizer_step` when the window is complete (see the module docstring)."""

    def __init__(self, trainer: TrainerParts, run: FitRun, epoch: int) -> None:
        hooks, module = trainer.hooks, trainer.module
        self.trainer, self.run, self.epoch = trainer, run, epoch
        self.before_backward, self.after_backward = hooks.get("on_before_backward"), hooks.get("on_after_backward")
        self.before_zero_grad = hooks.get("on_before_zero_grad")
        self.before_optimizer_step = hooks.get("on_before_optimizer_step")
        self.zero_grad, self.backward = _own(module, "optimizer_zero_grad"), _own(module, "backward")
        self.clip, self.step_hook = _own(module, "configure_gradient_clipping"), _own(module, "optimizer_step")
        self.scheduler_hook = _own(module, "lr_scheduler_step")
        self.plateau_steps = any(config.reduce_on_plateau for config in run.step_schedulers)  # they wait (loops.py)
        # Each prepared optimizer with the one it wraps (read per epoch: the accumulation may change between epochs).
        self.optimizers = [(opt, getattr(opt, "optimizer", opt)) for opt in trainer.prepared_optimizers]
        self.single_batch_windows = trainer.accelerator.gradient_accumulation_steps == 1
        # The one autocast of a Trainer step (the module is prepared without the engine's forward wrapper): the
        # precision wraps training_step once (full precision: training_step itself, nothing per step).
        self.call = trainer.accelerator.precision.autocast_calls(run.training_step)
        # The next batch opens a window (the last one closed, or none yet); a run resumed inside a window keeps the
        # gradients its checkpoint restored. Each optimizer step opens the next window.
        self.zero_due = trainer.accelerator.sync_gradients
        self.loss: torch.Tensor | None = None  # the window's last loss (what optimizer_step's closure returns)
        self.batch: Any = None
        self.batch_idx = self.evaluations = 0
        # Optimizers whose step takes a required closure (LBFGS) are stepped with one; every other optimizer is
        # stepped without (its fast path).
        self.closure_optimizers = [inner for _, inner in self.optimizers if _requires_closure(inner)]
        if self.closure_optimizers:
            _check_closure_run(trainer, self.closure_optimizers)
        # What optimizer_step hands the step (and a module's optimizer_step): decided once, not per step.
        self.closure = self._evaluating_closure if self.closure_optimizers else self._closure
        self._clip_key: tuple[int, ...] = ()
        self._clip_params: list[torch.nn.Parameter] = []

    def step(self, batch: Any, batch_idx: int) -> Any:
        """``training_step``, the gradients cleared at a window's first batch, and backward with its hooks."""
        t = self.trainer
        acc = t.accelerator
        self.batch, self.batch_idx = batch, batch_idx  # references, for a closure that evaluates again
        outputs = self.call(batch, batch_idx)
        if type(outputs) is torch.Tensor and outputs.numel() == 1:
            loss, num_items = outputs, None
        else:
            loss, num_items = unpack_loss(outputs)
        if not loss.requires_grad:
            raise no_grad_error(loss)
        if t.nonfinite.watch(loss, acc.step, self.epoch, batch_idx):  # a reference only: no device work
            t.nonfinite.check(acc)
        if self.zero_due:
            self.zero_due = False
            self._zero_grad(batch_idx)
        for hook in self.before_backward:
            hook(loss)
        if self.backward is None:
            acc.backward(loss, num_items=num_items)
        elif num_items is None:
            self.backward(loss)
        else:
            self.backward(loss, num_items=num_items)
        for hook in self.after_backward:
            hook()
        self.loss = loss
        return outputs

    def _zero_grad(self, batch_idx: int) -> None:
        # The hooks get the optimizer configure_optimizers returned (as in Lightning: trainer.optimizers); the
        # clearing acts on it too, since the prepared one only clears at a window's last batch (with one-batch
        # windows every batch is one: the prepared optimizer's fast path then).
        for optimizer, inner in self.optimizers:
            for hook in self.before_zero_grad:
                hook(inner)
            if self.zero_grad is not None:
                self.zero_grad(self.epoch, batch_idx, inner)
            else:
                (optimizer if self.single_batch_windows else inner).zero_grad(set_to_none=True)

    def optimizer_step(self, batch_idx: int) -> bool:
        """The window is complete: its hooks, clipping, the step, the per-step schedulers but ReduceLROnPlateau.
        True when the step was applied and step-interval ReduceLROnPlateau schedulers wait for it
        (:func:`step_plateau_schedulers`)."""
        t = self.trainer
        acc, run, optimizers = t.accelerator, self.run, t.prepared_optimizers
        self.zero_due = True
        if t.on_nonfinite_loss == "skip" and t.nonfinite.skip_step(acc):
            for optimizer in optimizers:  # before any unscale: the fp16 scaler never sees this window
                optimizer.zero_grad(set_to_none=True)
            return False
        if self.before_optimizer_step or self.clip is not None:
            for _, inner in self.optimizers:  # the hooks get the optimizers as configure_optimizers returned them
                acc.unscale_gradients(inner)  # hooks and clipping see true (unscaled, normalised) gradients
                for hook in self.before_optimizer_step:
                    hook(inner)
                if self.clip is not None:
                    self.clip(inner, **self._clip_arguments())
        if self.clip is None:
            if t.clip_grad_norm is not None:
                acc.clip_grad_norm_(self._clipped(), t.clip_grad_norm)
            elif t.clip_grad_value is not None:
                acc.clip_grad_value_(self._clipped(), t.clip_grad_value)
        self.evaluations = 0  # the closure's first call returns the loss just computed
        closure = self.closure
        for optimizer in optimizers:
            if self.step_hook is not None:
                self.step_hook(self.epoch, batch_idx, optimizer, closure)
            elif self.closure_optimizers:
                optimizer.step(closure)
            else:
                optimizer.step()
        if not run.step_schedulers or acc.optimizer_step_was_skipped:
            return False
        step_schedulers(t.callback_metrics, run.step_schedulers, "step", acc.step, self.scheduler_hook, plateau=False)
        return self.plateau_steps

    def epoch_schedulers(self) -> None:
        """At the epoch's last batch (as Lightning): its epoch schedulers step, except ``ReduceLROnPlateau``, which
        waits for the epoch's end values (``FitLoop.end_epoch``)."""
        t = self.trainer
        step_schedulers(t.callback_metrics, t.lr_scheduler_configs, "epoch", self.epoch + 1, self.scheduler_hook,
                        plateau=False)

    def _clipped(self) -> list[torch.nn.Parameter]:
        """What the Trainer's clipping sees: every parameter the optimizers hold, also groups added during the fit
        (a fine-tuning callback thawing a backbone), in the module's order (the order a plain loop's
        ``clip_grad_norm_(model.parameters())`` sums them in). Listed again only when a group was added."""
        key = tuple(len(inner.param_groups) for _, inner in self.optimizers)
        if key != self._clip_key:
            held = {id(p): p for _, inner in self.optimizers for group in inner.param_groups for p in group["params"]}
            ordered = [p for p in self.trainer.module.parameters() if held.pop(id(p), None) is not None]
            self._clip_key, self._clip_params = key, ordered + list(held.values())
        return self._clip_params

    def _closure(self) -> torch.Tensor | None:
        """What ``optimizer_step``'s closure returns: the loss already computed (forward and backward ran)."""
        return self.loss

    def _evaluating_closure(self) -> torch.Tensor | None:
        """The closure when an optimizer evaluates the loss again inside its step (LBFGS): first the loss already
        computed (forward and backward ran on these parameters), then ``training_step`` and backward run again on
        the same batch, gradients cleared first, as a plain loop's closure would."""
        self.evaluations += 1
        if self.evaluations > 1:
            self.zero_due = True
            with torch.enable_grad():
                self.step(self.batch, self.batch_idx)
            self.zero_due = True
        return self.loss

    def _clip_arguments(self) -> dict[str, Any]:
        return clip_settings(self.trainer)
