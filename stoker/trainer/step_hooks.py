"""A TrainingModule's own hooks around a batch and an optimizer step (callbacks do not get them, as in Lightning;
a DataModule may define the three transfer hooks, and its own then run instead of the module's).

Each default does what the Trainer does without it, and the loops look each one up once per epoch: a hook that is
not overridden costs nothing per batch (the Trainer then takes its own direct path). In call order:

    on_before_batch_transfer(batch, dataloader_idx)            the batch as the loader collated it
    transfer_batch_to_device(batch, device, dataloader_idx)    moves it (tensors in dicts, lists, tuples, .to())
    on_after_batch_transfer(batch, dataloader_idx)             the batch on the device
    ... training_step ...
    optimizer_zero_grad(epoch, batch_idx, optimizer)           at a window's first batch, before its backward
    backward(loss)                                             through the Accelerator (scaling, accumulation)
    configure_gradient_clipping(optimizer, gradient_clip_val=, gradient_clip_algorithm=)
    optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)
    lr_scheduler_step(scheduler, metric)                       each scheduler step the Trainer makes

and ``on_validation_model_zero_grad()`` before a validation inside ``fit``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from .mode_hooks import ModuleModes

#: The step hooks whose names start like the Trainer's ``on_*`` hooks but that only a module gets.
STEP_HOOKS_ON = ("on_before_batch_transfer", "on_after_batch_transfer", "on_validation_model_zero_grad")
TRANSFER_HOOKS = ("on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer")


class BatchTransfer:
    """The batch-transfer hooks' defaults, a ``TrainingModule``'s and a ``DataModule``'s: a data module that
    defines one of them is called instead of the module (Lightning's rule; ``hooks.batch_mover``)."""

    def on_before_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Changes a batch before it goes to the device (e.g. augmentation on the host); returns the batch."""
        return batch

    def transfer_batch_to_device(self, batch: Any, device: torch.device, dataloader_idx: int) -> Any:
        """Moves ``batch`` to ``device``: tensors at any depth of dicts, lists and tuples, and objects with a
        ``.to(device)``. Override for a batch type that needs its own move; returns the moved batch."""
        from ..accelerator import send_to_device

        return send_to_device(batch, device)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Changes a batch once it is on the device (e.g. augmentation on the GPU); returns the batch."""
        return batch


class StepHooks(ModuleModes, BatchTransfer):
    """The defaults of the module's batch and step hooks (see the module docstring)."""

    def prepare_data(self) -> None:
        """Downloads or writes what the data needs, once per node before ``setup`` (no state: it runs on one
        process only). Default: nothing."""

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        """Backward of ``loss`` through the Accelerator (accumulation's scaling, fp16 loss scaling). An override
        that calls ``loss.backward()`` itself gives those up; call ``super().backward(loss, ...)`` to keep them."""
        self.trainer.accelerator.backward(loss, *args, **kwargs)

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: torch.optim.Optimizer) -> None:
        """Clears ``optimizer``'s gradients (set to None) at the first batch of each accumulation window, before
        its backward."""
        optimizer.zero_grad(set_to_none=True)

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any,
                       optimizer_closure: Callable[[], Any] | None = None) -> None:
        """Steps ``optimizer`` once the window's gradients are complete. ``training_step`` and ``backward`` have
        already run: ``optimizer_closure()`` returns that loss without computing it again (an optimizer whose step
        evaluates the loss again, LBFGS, gets it computed again on the same batch from its second call). Override to
        change the learning rate before stepping (a warm-up) or to skip a step."""
        optimizer.step(closure=optimizer_closure)

    def configure_gradient_clipping(self, optimizer: Any, gradient_clip_val: float | None = None,
                                    gradient_clip_algorithm: str | None = None) -> None:
        """Clips before each optimizer step with the Trainer's ``gradient_clip_val`` / ``gradient_clip_algorithm``
        (None: no clipping); override to clip by your own rule with :meth:`clip_gradients`."""
        self.clip_gradients(optimizer, gradient_clip_val=gradient_clip_val,
                            gradient_clip_algorithm=gradient_clip_algorithm)

    def clip_gradients(self, optimizer: Any, gradient_clip_val: float | None = None,
                       gradient_clip_algorithm: str | None = None) -> None:
        """Clips ``optimizer``'s gradients (``"norm"``: total norm, default; ``"value"``: each element); fp16
        gradients are unscaled first. Under manual optimization call it between ``manual_backward`` and
        ``optimizer.step()``. An argument left None takes the Trainer's clipping setting; one that contradicts it
        is a ``ValueError`` (as in Lightning: one setting, two places)."""
        from .args import clip_algorithm
        from .manual import clip_gradients

        algorithm = clip_algorithm(gradient_clip_algorithm, "clip_gradients(gradient_clip_algorithm=...)")
        t = self.trainer
        trainer_value = t.clip_grad_norm if t.clip_grad_norm is not None else t.clip_grad_value
        trainer_algorithm = None if trainer_value is None else "norm" if t.clip_grad_norm is not None else "value"
        # Clipping by value is always chosen explicitly; "norm" may be the Trainer's default, which a call may change.
        conflict = (trainer_value is not None and gradient_clip_val is not None and gradient_clip_val != trainer_value,
                    trainer_algorithm == "value" and algorithm == "norm")
        if any(conflict):
            called = (f"gradient_clip_val={gradient_clip_val!r}" if conflict[0]
                      else f"gradient_clip_algorithm={gradient_clip_algorithm!r}")
            lightning = (f" (You have set `Trainer(gradient_clip_val={trainer_value!r})` and have passed "
                         f"`clip_gradients(gradient_clip_val={gradient_clip_val!r})`. Please use only one of them.)"
                         if conflict[0] else "")  # Lightning's words, for a test that matches them
            raise ValueError(f"clip_gradients({called}) contradicts the Trainer's clipping "
                             f"(gradient_clip_val={trainer_value!r}, gradient_clip_algorithm={trainer_algorithm!r}). "
                             "Set it in one place: remove it from the Trainer, or call clip_gradients(optimizer) to "
                             f"use the Trainer's.{lightning}")
        clip_gradients(self, optimizer, trainer_value if gradient_clip_val is None else gradient_clip_val,
                       algorithm or trainer_algorithm)

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        """Steps ``scheduler``; ``metric`` is the monitored value for a ``ReduceLROnPlateau``, None otherwise."""
        if metric is None:
            scheduler.step()
        else:
            scheduler.step(metric)

    def on_validation_model_zero_grad(self) -> None:
        """Before a validation inside ``fit``: clears the gradients, so validating holds no training memory."""
        self.zero_grad()

