"""The `Callback` base class: every hook the Trainer calls, as a no-op method.

This module is the one place where hooks are written down: their names, their order and their signatures seen by
callbacks. :data:`HOOKS` is read off the class below, so adding a hook means adding one method here (and its
``TrainingModule`` twin, which ``tests/trainer/test_module_surface.py`` checks against :data:`HOOKS`). The
dispatcher that calls hooks lives in ``stoker/trainer/hooks.py``. A callback overrides only the hooks it needs: the
Trainer calls a hook on a callback only when the callback's class overrides it, so unused hooks cost nothing in the
loop.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from datetime import timedelta

    import torch

    from stoker.accelerator import Accelerator
    from stoker.loggers import Logger

__all__ = ["HOOKS", "NOT_HOOKS", "Callback", "TrainerView", "evaluation_hooks"]

#: Public members of :class:`Callback` that are not hooks: the callback's own state, saved in checkpoints.
NOT_HOOKS = frozenset({"state_key", "state_dict", "load_state_dict", "log", "log_dict"})


class LastSaver(Protocol):
    """What `Timer` needs of the Trainer's ``checkpoint_callback`` (a `ModelCheckpoint`, not imported here: it
    imports this module)."""

    def save_last_now(self, trainer: TrainerView) -> str: ...


class PreparedLoader(Protocol):
    """What a callback may do with the fit's prepared train loader: one more pass, its position saved and put back
    (`StochasticWeightAveraging`'s BatchNorm pass)."""

    def __iter__(self) -> Iterator[Any]: ...
    def state_dict(self) -> dict[str, Any]: ...
    def load_state_dict(self, state: dict[str, Any]) -> None: ...


class FitRunView(Protocol):
    """What callbacks read of the current fit's prepared objects (``trainer.fit_run``, the Trainer's ``FitRun``)."""

    @property
    def train_loader(self) -> PreparedLoader: ...  # resumable, sharded, limited (trainer.train_dataloader: as given)


class RunOptionsView(Protocol):
    """What callbacks read of the Trainer's ``options`` (a ``RunOptions``, defined in the trainer package above)."""

    @property
    def num_sanity_val_steps(self) -> int | None: ...  # batches of each val loader a sanity check runs


class StageRecordView(Protocol):
    """What callbacks read of ``trainer.stage_record`` (the trainer package's ``StageRecord``)."""

    loader_batches: dict[str, list[int | float]]  # stage -> batches each of its loaders reads (a combined one: once)


class TrainerView(Protocol):
    """What a callback reads and calls on the Trainer that its hooks receive: public attributes and the facts of the
    fit in progress. ``stoker.Trainer`` has every member. Written here as a structural type because callbacks sit
    below the Trainer in the layers and never import it.
    """

    should_stop: bool  # callbacks set it to end the fit
    accumulate: int  # micro-batches per optimizer step; GradientAccumulationScheduler sets it

    @property
    def accelerator(self) -> Accelerator: ...
    @property
    def module(self) -> Any: ...
    @property
    def loggers(self) -> list[Logger]: ...
    @property
    def optimizers(self) -> list[torch.optim.Optimizer]: ...
    @property
    def lr_scheduler_configs(self) -> list[Any]: ...
    @property
    def callback_metrics(self) -> dict[str, Any]: ...
    @property
    def num_training_batches(self) -> int | float: ...
    @property
    def num_val_batches(self) -> list[int | float]: ...
    @property
    def num_test_batches(self) -> list[int | float]: ...
    @property
    def num_predict_batches(self) -> list[int | float]: ...
    @property
    def stage_record(self) -> StageRecordView: ...
    def module_defines(self, name: str, module: Any = None) -> bool: ...  # it defines hook `name` itself
    @property
    def dry_run(self) -> bool: ...  # a debugging run (fast_dev_run): checkpoints and early stopping stay inert
    @property
    def progress_bar_metrics(self) -> dict[str, Any]: ...
    @property
    def checkpoint_callback(self) -> LastSaver | None: ...  # the first ModelCheckpoint
    @property
    def default_root_dir(self) -> str: ...
    @property
    def global_step(self) -> int: ...
    @property
    def current_epoch(self) -> int: ...
    @property
    def max_epochs(self) -> int | None: ...
    @property
    def max_steps(self) -> int | None: ...
    @property
    def log_every_n_steps(self) -> int: ...
    @property
    def estimated_stepping_batches(self) -> int | float: ...
    @property
    def is_global_zero(self) -> bool: ...
    @property
    def training(self) -> bool: ...
    @property
    def sanity_checking(self) -> bool: ...
    @property
    def options(self) -> RunOptionsView: ...
    @property
    def fitting(self) -> bool: ...
    @property
    def check_val_every_n_epoch(self) -> int | None: ...
    @property
    def val_check_interval(self) -> int | float | timedelta: ...
    @property
    def window_closed(self) -> bool: ...
    @property
    def epoch_finished(self) -> bool: ...
    @property
    def validation_count(self) -> int: ...
    @property
    def fit_run(self) -> FitRunView | None: ...  # None before the first fit

    def save_checkpoint(self, path: str | os.PathLike) -> str: ...


class Callback:
    """Base class for Trainer callbacks: override the hooks you need.

    Every hook receives ``(trainer, module, ...)``. The Trainer calls the callbacks' hooks in the order of
    ``Trainer(callbacks=[...])``, then the module's (Lightning's order; ``on_load_checkpoint`` reaches the module
    first, and at ``on_train_epoch_end`` checkpointing and early stopping run after the module). A method named
    ``on_...`` that is not one of these hooks is an error at ``Trainer(...)`` time (a typo would otherwise be silently ignored).

    A callback that keeps state across a resume returns it from :meth:`state_dict` (tensors, numbers, strings,
    None, lists and dicts only — checkpoints never pickle) and takes it back in :meth:`load_state_dict`. It is
    stored under :attr:`state_key`, which defaults to the class's qualified name; override it (e.g. with
    :meth:`_generate_state_key`) when two instances of one class may be given to the same Trainer.

    The hooks' ``trainer`` is typed ``Any`` here on purpose: a user's callback annotates it with the Trainer it
    knows (``stoker.Trainer``), which a type checker accepts only as an override of an ``Any`` parameter. The
    built-in callbacks type it :class:`TrainerView`, the Trainer's attributes that callbacks read.

    ``on_validation_batch_start/end``, ``on_test_batch_*`` and ``on_predict_batch_*`` receive a trailing
    ``dataloader_idx`` only when the Trainer evaluates several loaders; give it a default (``= 0``).

    Example:
        >>> class PrintLoss(Callback):
        ...     def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        ...         if trainer.global_step % 100 == 0:
        ...             print(trainer.global_step, float(outputs))
        >>> trainer = Trainer(callbacks=[PrintLoss()])  # doctest: +SKIP
    """

    # -- logging (Lightning's callbacks log with self.log) --------------------------------------------------------
    # The module of the run in progress (the Trainer sets it when a run starts): what self.log logs through.
    run_module: Any = None

    def log(self, name: str, value: Any, **kwargs: Any) -> None:
        """``module.log(name, value, **kwargs)`` of the module being run: the value goes where the module's would
        (loggers, ``callback_metrics``, the bar), with the defaults of the hook it is called from."""
        if self.run_module is None:
            raise RuntimeError(f"{type(self).__name__}.log({name!r}) was called outside a Trainer run; call it "
                               "from one of the callback's hooks.")
        self.run_module.log(name, value, **kwargs)

    def log_dict(self, dictionary: Mapping[str, Any], **kwargs: Any) -> None:
        """``self.log`` for every ``name: value`` of ``dictionary``."""
        if self.run_module is None:
            raise RuntimeError(f"{type(self).__name__}.log_dict() was called outside a Trainer run; call it from "
                               "one of the callback's hooks.")
        self.run_module.log_dict(dictionary, **kwargs)

    # -- identity and state ---------------------------------------------------------------------------------------
    @property
    def state_key(self) -> str:
        """The key of this callback's state in a checkpoint (unique among a Trainer's callbacks)."""
        return type(self).__qualname__

    def _generate_state_key(self, **kwargs: Any) -> str:
        """``"ClassName{'monitor': 'val/loss', ...}"``: a state key that tells instances apart by their arguments, in
        the order given (Lightning's keys). Checkpoints written with the earlier sorted keys still restore: the
        Trainer matches keys by their class and non-None arguments, in any order."""
        return f"{type(self).__qualname__}{kwargs!r}"

    def state_dict(self) -> dict[str, Any]:
        """State to save in checkpoints (tensors, numbers, strings, None, lists, dicts)."""
        return {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restores what :meth:`state_dict` returned."""

    # -- run boundaries -------------------------------------------------------------------------------------------
    def setup(self, trainer: Any, module: Any, stage: str) -> None:
        """Start of ``fit``/``validate``/``test``/``predict`` (``stage``), before the optimizers are configured."""

    def teardown(self, trainer: Any, module: Any, stage: str) -> None:
        """End of ``fit``/``validate``/``test``/``predict``, also after an exception."""

    def on_fit_start(self, trainer: Any, module: Any) -> None:
        """Start of ``fit``, after the optimizers are prepared and a checkpoint (if any) is restored."""

    def on_fit_end(self, trainer: Any, module: Any) -> None:
        """End of ``fit``."""

    def on_exception(self, trainer: Any, module: Any, exception: BaseException) -> None:
        """An exception (including ``KeyboardInterrupt``) is leaving ``fit``/``validate``/``test``/``predict``."""

    def on_sanity_check_start(self, trainer: Any, module: Any) -> None:
        """Before the ``num_sanity_val_steps`` validation that precedes training (2 batches of each val loader by
        default)."""

    def on_sanity_check_end(self, trainer: Any, module: Any) -> None:
        """After that validation."""

    # -- training -------------------------------------------------------------------------------------------------
    def on_train_start(self, trainer: Any, module: Any) -> None:
        """Training begins (after ``on_fit_start``)."""

    def on_train_end(self, trainer: Any, module: Any) -> None:
        """Training ended (before ``on_fit_end``)."""

    def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
        """A training epoch begins (also when a run resumes in the middle of one)."""

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        """A training epoch ended, after its end-of-epoch validation; epoch metrics are in ``callback_metrics``."""

    def on_train_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int) -> None:
        """Before ``training_step`` of one (micro-)batch."""

    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        """After one (micro-)batch, including the optimizer step when it closed an accumulation window.

        ``outputs`` is what ``training_step`` returned, as Lightning passes it: a loss tensor arrives as
        ``{"loss": loss}``, a dict as it is, and None as None.
        """

    def on_before_backward(self, trainer: Any, module: Any, loss: Any) -> None:
        """Before ``backward`` of the loss ``training_step`` returned."""

    def on_after_backward(self, trainer: Any, module: Any) -> None:
        """After ``backward``; gradients may still be incomplete inside an accumulation window."""

    def on_before_optimizer_step(self, trainer: Any, module: Any, optimizer: Any) -> None:
        """Gradients are complete and unscaled (fp16), before clipping and ``optimizer.step()``."""

    def on_before_zero_grad(self, trainer: Any, module: Any, optimizer: Any) -> None:
        """After the optimizer step, before ``optimizer.zero_grad()``."""

    # -- validation -----------------------------------------------------------------------------------------------
    def on_validation_start(self, trainer: Any, module: Any) -> None:
        """Validation begins (the module is in eval mode, gradients off)."""

    def on_validation_end(self, trainer: Any, module: Any) -> None:
        """Validation ended; its epoch metrics are in ``callback_metrics``."""

    def on_validation_epoch_start(self, trainer: Any, module: Any) -> None:
        """Before the first validation batch."""

    def on_validation_epoch_end(self, trainer: Any, module: Any) -> None:
        """After the last validation batch, before its epoch metrics are computed."""

    def on_validation_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int,
                                  dataloader_idx: int = 0) -> None:
        """Before ``validation_step``."""

    def on_validation_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int,
                                dataloader_idx: int = 0) -> None:
        """After ``validation_step`` (``outputs`` is what it returned)."""

    # -- test -----------------------------------------------------------------------------------------------------
    def on_test_start(self, trainer: Any, module: Any) -> None:
        """Testing begins."""

    def on_test_end(self, trainer: Any, module: Any) -> None:
        """Testing ended; its epoch metrics are in ``callback_metrics``."""

    def on_test_epoch_start(self, trainer: Any, module: Any) -> None:
        """Before the first test batch."""

    def on_test_epoch_end(self, trainer: Any, module: Any) -> None:
        """After the last test batch."""

    def on_test_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int,
                            dataloader_idx: int = 0) -> None:
        """Before ``test_step``."""

    def on_test_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int,
                          dataloader_idx: int = 0) -> None:
        """After ``test_step``."""

    # -- predict --------------------------------------------------------------------------------------------------
    def on_predict_start(self, trainer: Any, module: Any) -> None:
        """Prediction begins."""

    def on_predict_end(self, trainer: Any, module: Any) -> None:
        """Prediction ended."""

    def on_predict_epoch_start(self, trainer: Any, module: Any) -> None:
        """Before the first predict batch."""

    def on_predict_epoch_end(self, trainer: Any, module: Any) -> None:
        """After the last predict batch."""

    def on_predict_batch_start(self, trainer: Any, module: Any, batch: Any, batch_idx: int,
                               dataloader_idx: int = 0) -> None:
        """Before ``predict_step``."""

    def on_predict_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int,
                             dataloader_idx: int = 0) -> None:
        """After ``predict_step``."""

    # -- checkpoints ----------------------------------------------------------------------------------------------
    def on_save_checkpoint(self, trainer: Any, module: Any, checkpoint: dict[str, Any]) -> None:
        """A checkpoint is being written: add entries to ``checkpoint`` (tensors, numbers, strings, lists, dicts)."""

    def on_load_checkpoint(self, trainer: Any, module: Any, checkpoint: dict[str, Any]) -> None:
        """A checkpoint was restored; ``checkpoint`` holds what ``on_save_checkpoint`` hooks added."""


def _hook_names(cls: type) -> tuple[str, ...]:
    """The public methods ``cls`` defines itself, other than :data:`NOT_HOOKS`, in the order they are written."""
    return tuple(name for name, value in vars(cls).items()
                 if callable(value) and not name.startswith("_") and name not in NOT_HOOKS)


class Checkpoint(Callback):
    """Lightning's base class of the callbacks that write checkpoints (``ModelCheckpoint`` and your own): the
    Trainer runs them after the other callbacks, counts them for ``enable_checkpointing`` and lists them in
    ``trainer.checkpoint_callbacks``. It adds no hook of its own."""


#: Every hook, in the order ``Callback`` defines them: ``setup``/``teardown`` and the ``on_*`` hooks. Both a
#: ``TrainingModule`` and a ``Callback`` may define them (callbacks get ``(trainer, module, ...)`` first).
HOOKS: tuple[str, ...] = _hook_names(Callback)
#: The hooks ``TrainingModule`` has no default of (Lightning's module has neither): a module is called only if it
#: defines them.
CALLBACK_ONLY_HOOKS: tuple[str, ...] = ("on_sanity_check_start", "on_sanity_check_end")


def evaluation_hooks(stage: str) -> tuple[Callable[..., None], Callable[..., None], Callable[..., None]]:
    """The start, batch-end and end hooks of one evaluation ``stage`` (``"validate"``, ``"test"``, ``"predict"``) for
    a callback that treats the three alike: they call its ``_eval_start(trainer, stage)``,
    ``_eval_batch(trainer, module, batch, stage)`` and ``_eval_end(trainer, stage)``.

    Example (in a class body): ``on_test_start, on_test_batch_end, on_test_end = evaluation_hooks("test")``.
    """
    def start(self: Any, trainer: TrainerView, module: Any) -> None:
        self._eval_start(trainer, stage)

    def batch_end(self: Any, trainer: TrainerView, module: Any, outputs: Any, batch: Any, batch_idx: int,
                  dataloader_idx: int = 0) -> None:
        self._eval_batch(trainer, module, batch, stage)

    def end(self: Any, trainer: TrainerView, module: Any) -> None:
        self._eval_end(trainer, stage)

    return start, batch_end, end
