"""The Trainer's read-only attributes that callbacks and modules read (Lightning's names), as a mixin.

Owns nothing but the views: each property reads the state that ``trainer.py``, the loops and the Accelerator own.
"""

from __future__ import annotations

import os
from typing import Any

from ..accelerator import check_accumulation_steps
from .checkpointing import find_last_checkpoint
from .stages import PREDICT, TEST, TRAIN, VALIDATE


class TrainerAttributes:
    """``global_step``, ``current_epoch``, ``logger``, ``checkpoint_callback``, the stage flags and the like, and
    :meth:`find_last_checkpoint` (what ``ckpt_path="last"`` picks)."""

    @property
    def global_step(self) -> int:
        """Applied optimizer steps (accumulation micro-steps and skipped fp16 steps do not count)."""
        return self.accelerator.step

    @property
    def current_epoch(self) -> int:
        return self.fit_loop.epoch

    @property
    def is_global_zero(self) -> bool:
        return self.accelerator.is_main_process

    # Lightning's process facts, read from the Accelerator (which owns them)
    @property
    def global_rank(self) -> int:
        return self.accelerator.process_index

    @property
    def local_rank(self) -> int:
        return self.accelerator.local_process_index

    @property
    def world_size(self) -> int:
        return self.accelerator.num_processes

    @property
    def node_rank(self) -> int:
        """This node's index: the processes' global rank divided by the processes per node."""
        return self.accelerator.process_index // max(1, self.num_devices)

    @property
    def num_devices(self) -> int:
        """Processes (devices) per node."""
        return max(1, self.accelerator.num_processes // max(1, self.num_nodes))

    @property
    def logger(self) -> Any:
        return self.loggers[0] if self.loggers else None

    @property
    def log_dir(self) -> str:
        """The first logger's folder, else ``default_root_dir``."""
        return self.loggers[0].log_dir if self.loggers else self.default_root_dir

    @property
    def checkpoint_callback(self) -> Any:
        """The first ``ModelCheckpoint`` among the callbacks, or None."""
        return next(iter(self.checkpoint_callbacks), None)

    @property
    def checkpoint_callbacks(self) -> list[Any]:
        """Every ``ModelCheckpoint`` among the callbacks."""
        from ..callbacks import ModelCheckpoint

        return [c for c in self.callbacks if isinstance(c, ModelCheckpoint)]

    @property
    def early_stopping_callback(self) -> Any:
        """The first ``EarlyStopping`` among the callbacks, or None."""
        return next(iter(self.early_stopping_callbacks), None)

    @property
    def early_stopping_callbacks(self) -> list[Any]:
        """Every ``EarlyStopping`` among the callbacks."""
        from ..callbacks import EarlyStopping

        return [c for c in self.callbacks if isinstance(c, EarlyStopping)]

    @property
    def lightning_module(self) -> Any:
        return self.module

    @property
    def train_dataloader(self) -> Any:
        """The prepared train loader of the current (or last) ``fit``, or None (Lightning's attribute)."""
        return self._fit_run.train_loader if self._fit_run is not None else None

    @property
    def training(self) -> bool:
        return self.state.stage == TRAIN.name

    @property
    def validating(self) -> bool:
        return self.state.stage == VALIDATE.name

    @property
    def testing(self) -> bool:
        return self.state.stage == TEST.name

    @property
    def predicting(self) -> bool:
        return self.state.stage == PREDICT.name

    @property
    def sanity_checking(self) -> bool:
        """True during the ``num_sanity_val_steps`` validation before training (none by default)."""
        return self._sanity_checking

    @property
    def accumulate(self) -> int:
        """Micro-batches per optimizer step: the Accelerator's ``gradient_accumulation_steps``, stored there only
        (``Trainer(accumulate=...)`` sets it; ``trainer.accelerator.gradient_accumulation_steps = 4`` and
        ``trainer.accumulate = 4`` are the same change). A ``GradientAccumulationScheduler`` changes it epoch by
        epoch during ``fit``."""
        return self.accelerator.gradient_accumulation_steps

    @accumulate.setter
    def accumulate(self, value: int) -> None:
        self.accelerator.gradient_accumulation_steps = check_accumulation_steps(
            value, argument="trainer.accumulate = ...")

    # -- facts of the fit in progress, for callbacks (read-only; the loops own them) ---------------------------
    @property
    def fitting(self) -> bool:
        """True while a ``fit()`` call is running (from its ``setup`` hook to its ``teardown`` hook), False during
        a ``validate``/``test``/``predict`` call and between calls."""
        return self.state.fn == "fit"

    @property
    def window_closed(self) -> bool:
        """True when the current (or last) training batch closed an accumulation window, i.e. an optimizer step
        was attempted for it (also one skipped for a non-finite loss or an fp16 overflow: see ``global_step``).

        Set when the batch's step has run, so ``on_train_batch_end`` and the validation or ``on_train_epoch_end``
        that follow it read it; False again when the next batch starts (in its ``on_train_batch_start``) and at
        the start of each ``fit``. With ``accumulate=1`` every batch closes a window.
        """
        return self.fit_loop.window_closed

    @property
    def epoch_finished(self) -> bool:
        """In ``on_train_epoch_end`` (and the end-of-epoch validation before it): True when the training epoch
        reached its last batch, False when a ``should_stop`` or ``max_steps`` stop ended it early.

        True as well when the train loader's length is unknown (a stop cannot be told from the end there), and
        when a resumed fit only finishes an epoch whose batches the checkpointed run had completed. False from
        ``on_train_epoch_start`` until the epoch's batches are over; outside a fit: the last epoch's value.
        """
        return self.fit_loop.epoch_finished

    @property
    def validation_count(self) -> int:
        """Validation runs completed in the current (or last) ``fit`` call; the sanity check is not counted, nor
        are ``validate()`` calls. A run counts once its epoch values are published: its own
        ``on_validation_end`` already sees it. Starts at 0 in every ``fit`` call (a resumed one too)."""
        return self.fit_loop.validation_count

    @property
    def estimated_stepping_batches(self) -> int | float:
        """Optimizer steps ``fit`` will take (for schedulers built in ``configure_optimizers``): per epoch, the
        training batches divided by :attr:`accumulate` as it is when read (a last, short window counts as a
        step), times the epochs, capped by ``max_steps``. A ``GradientAccumulationScheduler``'s later values are
        not foreseen: in ``configure_optimizers`` it reads the Trainer's starting value, as Lightning's does."""
        return self._setup.estimated_steps()

    def find_last_checkpoint(self) -> str | None:
        """The newest complete checkpoint for ``ckpt_path="last"``, or None.

        Looks in ``{default_root_dir}/checkpoints`` and the ModelCheckpoint's ``dirpath``; picks the one saved
        last (by the time each save records), preferring the ``last`` folder on ties, then more optimizer steps.
        """
        folders = [os.path.join(self.default_root_dir, "checkpoints")]
        callback = self.checkpoint_callback
        if callback is not None and getattr(callback, "dirpath", None):
            folders.append(callback.dirpath)
        return find_last_checkpoint(folders)
