"""`WeightAveraging` and `EMAWeightAveraging`: a running average of the weights, kept beside the module during fit.

Owns: when the average is updated (:meth:`WeightAveraging.should_update`), the copy it lives in (a
``torch.optim.swa_utils.AveragedModel``, on ``device``), validating with the average, putting it into the module when
training ends, and the state that makes it resume. The averaging arithmetic is the ``AveragedModel``'s (its
``avg_fn`` / ``multi_avg_fn``; ``get_ema_multi_avg_fn`` for :class:`EMAWeightAveraging`).
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import torch
from torch import nn

from stoker.callbacks.base import Callback, TrainerView

if TYPE_CHECKING:
    from torch.optim.swa_utils import AveragedModel

__all__ = ["EMAWeightAveraging", "WeightAveraging"]


class WeightAveraging(Callback):
    """Keeps an average of the module's weights during ``fit``; validation runs with it, and the module ends ``fit``
    holding it (Lightning's callback).

    By default the average takes in the weights after every optimizer step; override :meth:`should_update` to
    choose other steps or epoch ends. The average is a ``torch.optim.swa_utils.AveragedModel`` (a copy of the module
    without its Trainer): ``avg_fn`` / ``multi_avg_fn`` given here choose the arithmetic (default: the plain mean).
    While a fit validates, the module holds the averaged weights and gets its own back afterwards.

    Checkpoints written during ``fit`` hold the training weights, and the average in this callback's state, so a
    resumed fit goes on with the same average (as stoker's ``StochasticWeightAveraging``; Lightning writes the average
    as the model's weights instead). Save after ``fit`` to keep the averaged model.

    Args:
        device: Where the average lives (default ``"cpu"``: no accelerator memory); None: beside the parameters.
        use_buffers: Average the buffers too (BatchNorm statistics), else they are copied from the module.
        **kwargs: Passed to ``AveragedModel`` (``avg_fn``, ``multi_avg_fn``).

    Example:
        >>> from torch.optim.swa_utils import get_swa_avg_fn
        >>> averaging = WeightAveraging(avg_fn=get_swa_avg_fn())
        >>> averaging.should_update(step_idx=0), averaging.should_update(epoch_idx=0)
        (True, False)
    """

    def __init__(self, device: torch.device | str | int | None = "cpu", use_buffers: bool = True,
                 **kwargs: Any) -> None:
        if not isinstance(use_buffers, bool):
            raise TypeError(f"WeightAveraging(use_buffers={use_buffers!r}) must be True or False.")
        self.device = torch.device(device) if device is not None else None
        self.use_buffers = use_buffers
        self.kwargs = kwargs
        self._average_model: AveragedModel | None = None  # built when a fit sets up (Lightning's name)
        self.latest_update_step = 0  # the global step the average last took in
        self._pending: dict[str, Any] | None = None  # a restored state that arrived before the average was built

    @property
    def average_model(self) -> AveragedModel | None:
        """The ``AveragedModel`` holding the average (its ``module`` and ``n_averaged``); None before a fit."""
        return self._average_model

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        """Whether the average takes in the weights after optimizer step ``step_idx`` (counted from 0), or at the
        end of training epoch ``epoch_idx`` (each is asked on its own). Default: after every step, not at epoch ends."""
        return step_idx is not None

    # -- the fit --------------------------------------------------------------------------------------------------
    def setup(self, trainer: TrainerView, module: Any, stage: str) -> None:
        if stage != "fit":
            return
        from torch.optim.swa_utils import AveragedModel

        # The module's copy leaves its Trainer behind (TrainingModule.__getstate__); loaders stay the module's own.
        self._average_model = AveragedModel(module, device=self.device, use_buffers=self.use_buffers, **self.kwargs)
        if self._pending is not None:
            self.load_state_dict(self._pending)

    def on_train_batch_end(self, trainer: TrainerView, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        step = trainer.global_step  # a batch that only accumulated (or was skipped) has not moved it
        if step > self.latest_update_step and self.should_update(step_idx=step - 1):
            self._built().update_parameters(module)
            self.latest_update_step = step

    def on_train_epoch_end(self, trainer: TrainerView, module: Any) -> None:
        if self.should_update(epoch_idx=trainer.current_epoch):
            self._built().update_parameters(module)

    def on_validation_epoch_start(self, trainer: TrainerView, module: Any) -> None:
        if self._averaging(trainer):
            self._swap(module)

    def on_validation_epoch_end(self, trainer: TrainerView, module: Any) -> None:
        if self._averaging(trainer):
            self._swap(module)

    def on_train_end(self, trainer: TrainerView, module: Any) -> None:
        if self.average_model is None or int(self.average_model.n_averaged) == 0:  # nothing averaged: weights stay
            return
        with torch.no_grad():
            for average, current in self._pairs(module):
                current.copy_(average.to(current.device))

    def _built(self) -> AveragedModel:
        if self._average_model is None:
            raise RuntimeError(f"{type(self).__name__}: the average is built when a fit sets up (setup(stage='fit')); "
                               "a training hook ran before it. Call super().setup(...) in an override of setup.")
        return self._average_model

    def _averaging(self, trainer: TrainerView) -> bool:
        """Validation inside a fit, with an average that took in weights (not the sanity check)."""
        return self.average_model is not None and trainer.fitting and not trainer.sanity_checking \
            and int(self.average_model.n_averaged) > 0

    def _pairs(self, module: nn.Module) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        """(average, module) tensors: the parameters, and the buffers when they are averaged."""
        averaged = self._built().module
        yield from zip(averaged.parameters(), module.parameters())
        if self.use_buffers:
            yield from zip(averaged.buffers(), module.buffers())

    def _swap(self, module: nn.Module) -> None:
        """The module and the average trade weights (each stays on its own device)."""
        with torch.no_grad():
            for average, current in self._pairs(module):
                held = current.detach().clone()
                current.copy_(average.to(current.device))
                average.copy_(held.to(average.device))

    # -- state ----------------------------------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        average = None if self.average_model is None else \
            {name: t.detach().clone() for name, t in self.average_model.state_dict().items()}
        return {"latest_update_step": self.latest_update_step, "average": average}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.latest_update_step = int(state_dict["latest_update_step"])
        average = state_dict.get("average")
        if average is None:
            return
        if self.average_model is None:  # restored before the fit built the average: applied in setup
            self._pending = copy.copy(state_dict)
            return
        self.average_model.load_state_dict(average)
        self._pending = None


class EMAWeightAveraging(WeightAveraging):
    """An exponential moving average of the weights: ``average = decay * average + (1 - decay) * weights`` after
    every ``update_every_n_steps``-th optimizer step (steps counted from 0, so step 0 is one), from step
    ``update_starting_at_step`` on; with ``update_starting_at_epoch``, also at the end of every training epoch from
    that one on (Lightning's callback).

    Example:
        >>> ema = EMAWeightAveraging(decay=0.99, update_every_n_steps=5, update_starting_at_step=10)
        >>> [step for step in range(25) if ema.should_update(step_idx=step)]
        [10, 15, 20]
    """

    def __init__(self, device: torch.device | str | int | None = "cpu", use_buffers: bool = True,
                 decay: float = 0.999, update_every_n_steps: int = 1, update_starting_at_step: int | None = None,
                 update_starting_at_epoch: int | None = None, **kwargs: Any) -> None:
        from torch.optim.swa_utils import get_ema_multi_avg_fn

        if isinstance(decay, bool) or not isinstance(decay, (int, float)) or not 0 <= decay <= 1:
            raise ValueError(f"EMAWeightAveraging(decay={decay!r}) must be a number in [0, 1].")
        for name, value in (("update_every_n_steps", update_every_n_steps),
                            ("update_starting_at_step", update_starting_at_step),
                            ("update_starting_at_epoch", update_starting_at_epoch)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 0):
                raise ValueError(f"EMAWeightAveraging({name}={value!r}) must be an integer >= 0"
                                 + (" (0: no step updates)." if name == "update_every_n_steps" else " or None."))
        super().__init__(device=device, use_buffers=use_buffers, multi_avg_fn=get_ema_multi_avg_fn(decay), **kwargs)
        self.decay = decay
        self.update_every_n_steps = update_every_n_steps
        self.update_starting_at_step = update_starting_at_step
        self.update_starting_at_epoch = update_starting_at_epoch

    def should_update(self, step_idx: int | None = None, epoch_idx: int | None = None) -> bool:
        if step_idx is not None and self.update_every_n_steps > 0 and step_idx % self.update_every_n_steps == 0 \
                and step_idx >= (self.update_starting_at_step or 0):
            return True
        return epoch_idx is not None and self.update_starting_at_epoch is not None \
            and epoch_idx >= self.update_starting_at_epoch
