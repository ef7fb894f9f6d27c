"""The Trainer's read-only attributes that callbacks and modules read (Lightning's names), as a mixin.

Owns nothing but the views: each property reads the state that ``trainer.py``, the loops and the Accelerator own.
"""

from __future__ import annotations

import os
from typing import Any

from .checkpointing import find_last_checkpoint


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
        from ..callbacks import ModelCheckpoint

        return next((c for c in self.callbacks if isinstance(c, ModelCheckpoint)), None)

    @property
    def lightning_module(self) -> Any:
        return self.module

    @property
    def train_dataloader(self) -> Any:
        """The prepared train loader of the current (or last) ``fit``, or None (Lightning's attribute)."""
        return self._train_loader

    @property
    def training(self) -> bool:
        return self.state.stage == "train"

    @property
    def validating(self) -> bool:
        return self.state.stage == "validate"

    @property
    def testing(self) -> bool:
        return self.state.stage == "test"

    @property
    def predicting(self) -> bool:
        return self.state.stage == "predict"

    @property
    def sanity_checking(self) -> bool:
        """True during the ``num_sanity_val_steps`` validation before training (none by default)."""
        return self._sanity_checking

    @property
    def estimated_stepping_batches(self) -> int | float:
        """Optimizer steps ``fit`` will take (for schedulers built in ``configure_optimizers``)."""
        return self._setup.estimated_steps()

    def find_last_checkpoint(self) -> str | None:
        """The newest complete checkpoint for ``ckpt_path="last"``, or None.

        Looks in ``{default_root_dir}/checkpoints`` and the ModelCheckpoint's ``dirpath``; picks the most
        optimizer steps, preferring the ``last`` folder on ties, then the most recently written.
        """
        folders = [os.path.join(self.default_root_dir, "checkpoints")]
        callback = self.checkpoint_callback
        if callback is not None and getattr(callback, "dirpath", None):
            folders.append(callback.dirpath)
        return find_last_checkpoint(folders)
