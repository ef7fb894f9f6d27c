"""`GradientAccumulationScheduler`: change the number of micro-batches per optimizer step from epoch to epoch.

Owns: the schedule (``{epoch: micro-batches}``) and applying it at the start of each training epoch through the
Accelerator's public ``gradient_accumulation_steps`` setter, when no accumulation window is open (a window always
closes at the end of an epoch). The window's length, its normalisation (a short last window averaged over what it
holds) and ``sync_gradients`` stay the Accelerator's.
"""

from __future__ import annotations

import warnings

from typing import Any

from stoker.callbacks.base import Callback, TrainerView

__all__ = ["GradientAccumulationScheduler"]


class GradientAccumulationScheduler(Callback):
    """Accumulates gradients over a number of micro-batches that depends on the epoch.

    ``scheduling`` maps a 0-based epoch to the number of micro-batches per optimizer step from that epoch on;
    epochs before the first key use 1. The schedule is applied at the start of every training epoch, also in a run
    resumed from a checkpoint (it depends on the epoch alone, so it has no state of its own). Give the Trainer
    ``accumulate=1`` (the default): the schedule replaces it. ``trainer.accumulate`` (the Accelerator's
    ``gradient_accumulation_steps``) is the value in force; the value from before the fit comes back when it ends.
    (``trainer.estimated_stepping_batches`` assumes the starting value, as Lightning's does.)

    Args:
        scheduling: ``{epoch: micro_batches}``, e.g. ``{0: 8, 4: 4, 8: 1}``; epochs are ints >= 0, values ints >= 1.

    Example:
        >>> scheduler = GradientAccumulationScheduler(scheduling={0: 4, 2: 2})  # 4 micro-batches, from epoch 2: 2
        >>> trainer = Trainer(max_epochs=4, callbacks=[scheduler])            # doctest: +SKIP
        >>> scheduler.get_accumulate_grad_batches(3)
        2
    """

    def __init__(self, scheduling: dict[int, int]) -> None:
        if not isinstance(scheduling, dict) or not scheduling:
            raise TypeError(f"GradientAccumulationScheduler(scheduling={scheduling!r}) needs a non-empty dict "
                            "{epoch: micro_batches}, e.g. {0: 4, 5: 2}.")
        for epoch, steps in scheduling.items():
            if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
                raise ValueError(f"Epoch should be an int greater than or equal to 0. Got {list(scheduling)}. "
                                 f"(GradientAccumulationScheduler(scheduling={scheduling!r}): the key {epoch!r} is "
                                 "not an epoch. Keys are 0-based epochs.)")
            if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
                raise ValueError(f"Accumulation factor should be an int greater than 0. Got "
                                 f"{list(scheduling.values())}. (GradientAccumulationScheduler(scheduling="
                                 f"{scheduling!r}): {epoch}: {steps!r} is not a number of micro-batches; 1: no "
                                 "accumulation.)")
        self.scheduling = dict(sorted(scheduling.items()))
        if 0 not in self.scheduling:
            self.scheduling = {0: 1, **self.scheduling}
        self.epochs = list(self.scheduling)
        self._before: int | None = None  # the window length before the fit, restored at its end

    def going_to_accumulate_grad_batches(self) -> bool:
        """Whether any epoch accumulates (a value > 1)."""
        return any(v > 1 for v in self.scheduling.values())

    def get_accumulate_grad_batches(self, epoch: int) -> int:
        """The micro-batches per optimizer step in ``epoch`` (0-based)."""
        steps = 1
        for start in self.epochs:
            if epoch >= start:
                steps = self.scheduling[start]
        return steps

    def on_train_start(self, trainer: TrainerView, module: Any) -> None:
        self._before = trainer.accelerator.gradient_accumulation_steps
        if not getattr(module, "automatic_optimization", True):
            raise RuntimeError("Automatic gradient accumulation and the `GradientAccumulationScheduler` is not "
                               "supported for manual optimization: GradientAccumulationScheduler needs automatic "
                               "optimization; with "
                               "automatic_optimization = False the module steps its optimizers itself. Remove the "
                               "callback, or accumulate in training_step.")
        if trainer.accumulate != 1:
            raise ValueError("You have set `accumulate_grad_batches` and are using the `GradientAccumulationScheduler` "
                             f"callback: Trainer(accumulate={trainer.accumulate}) and a GradientAccumulationScheduler "
                             "both set "
                             "the accumulation: remove accumulate from the Trainer (the schedule's epoch 0 entry "
                             "sets the start) or remove the callback.")
        hooks = [name for name in ("optimizer_step", "optimizer_zero_grad") if trainer.module_defines(name, module)]
        if hooks:
            warnings.warn(f"{type(module).__name__} overrides {' and '.join(hooks)}: with a "
                          "GradientAccumulationScheduler the hooks will not be called on every batch, only when an "
                          "accumulation window closes.",
                          UserWarning, stacklevel=2)
        self._apply(trainer)  # a run resumed in the middle of an epoch continues with that epoch's value

    def on_train_epoch_start(self, trainer: TrainerView, module: Any) -> None:
        self._apply(trainer)

    def _apply(self, trainer: TrainerView) -> None:
        trainer.accelerator.gradient_accumulation_steps = self.get_accumulate_grad_batches(trainer.current_epoch)

    def on_train_end(self, trainer: TrainerView, module: Any) -> None:
        # Later evaluation, or a Trainer reused without the schedule's epoch, sees the starting value again.
        self._restore(trainer)

    def on_exception(self, trainer: TrainerView, module: Any, exception: BaseException) -> None:
        self._restore(trainer)

    def _restore(self, trainer: TrainerView) -> None:
        if self._before is not None:
            trainer.accelerator.gradient_accumulation_steps, self._before = self._before, None

    def __repr__(self) -> str:
        return f"GradientAccumulationScheduler(scheduling={self.scheduling!r})"
