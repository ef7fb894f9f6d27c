"""`OnExceptionCheckpoint`: a full checkpoint of the state at the moment ``fit`` raised (or was interrupted).

Owns: when to save (an exception leaving ``fit`` after training started), where (``{dirpath}/{filename}``), and
removing that folder again after a later ``fit`` ends normally (it then describes an older state than the run that
finished). The checkpoint itself is ``trainer.save_checkpoint`` (a complete ``save_state`` folder, written atomically).
"""

from __future__ import annotations

import os
import sys
import warnings
from typing import Any

from stoker.callbacks.base import Callback, TrainerView
from stoker.callbacks.checkpoint_files import remove_folder, safe_name

__all__ = ["OnExceptionCheckpoint"]


class OnExceptionCheckpoint(Callback):
    """Saves a resumable checkpoint to ``{dirpath}/{filename}`` when ``fit`` raises, including ``KeyboardInterrupt``.

    The folder holds the state at the moment of the exception: the weights after the last applied optimizer step,
    optimizer/scheduler/scaler states, RNG states and the loop's position *after* the batch that was being
    processed (that batch is not run again on resume). Gradients of an accumulation window that was not finished
    are not saved. Resume with ``trainer.fit(..., ckpt_path=callback.ckpt_path)``; ``ckpt_path="last"`` also finds
    it when ``dirpath`` is the checkpoint folder (it is the checkpoint saved last). A failure while saving is
    reported as a warning and never replaces the original exception. After a later ``fit`` with this callback ends
    without an exception, the folder is deleted.

    A ``SystemExit`` (a preemption: the Trainer has already saved ``last``, or ``sys.exit``) is not saved again.
    Only single-process runs save: with several processes an exception usually reaches one process only, and the
    collective save would wait forever for the others (a warning says so).

    Args:
        dirpath: Folder to save into.
        filename: Name of the checkpoint folder inside ``dirpath``; made safe for file systems.

    Example:
        >>> on_crash = OnExceptionCheckpoint("runs/exp1/checkpoints")
        >>> trainer = Trainer(callbacks=[on_crash])                        # doctest: +SKIP
        >>> trainer.fit(module, loader)                                    # doctest: +SKIP
        >>> trainer.fit(module, loader, ckpt_path=on_crash.ckpt_path)     # doctest: +SKIP
    """

    def __init__(self, dirpath: str | os.PathLike, filename: str = "on_exception") -> None:
        if not isinstance(dirpath, (str, os.PathLike)) or not os.fspath(dirpath):
            raise TypeError(f"OnExceptionCheckpoint(dirpath={dirpath!r}) must be a folder path.")
        if not isinstance(filename, str) or not filename.strip():
            raise ValueError(f"OnExceptionCheckpoint(filename={filename!r}) must be a non-empty folder name.")
        self.dirpath = os.path.abspath(os.fspath(dirpath))
        self.filename = safe_name(filename)
        self._training = False
        self._failed = False
        self.saved_path: str | None = None

    @property
    def ckpt_path(self) -> str:
        """``{dirpath}/{filename}``: where the checkpoint is written."""
        return os.path.join(self.dirpath, self.filename)

    @property
    def state_key(self) -> str:
        return self._generate_state_key(dirpath=self.dirpath, filename=self.filename)

    def setup(self, trainer: TrainerView, module: Any, stage: str) -> None:
        if stage == "fit":
            self._training = self._failed = False

    def on_train_start(self, trainer: TrainerView, module: Any) -> None:
        self._training = True  # from here on the prepared state is complete enough to save

    def on_exception(self, trainer: TrainerView, module: Any, exception: BaseException) -> None:
        if not trainer.fitting:
            return
        self._failed = True
        if not self._training or isinstance(exception, SystemExit):
            return  # nothing trained yet; or a preemption, which has saved `last` already
        self._training = False
        if trainer.accelerator.num_processes > 1:
            warnings.warn(f"OnExceptionCheckpoint did not save after {type(exception).__name__}: with "
                          f"{trainer.accelerator.num_processes} processes the save is collective and the other "
                          "processes may never join it. Use ModelCheckpoint(every_n_train_steps=...) for "
                          "multi-process runs.", RuntimeWarning, stacklevel=2)
            return
        try:
            self.saved_path = trainer.save_checkpoint(self.ckpt_path)
        except Exception as error:  # the user must see the original exception, not this one
            warnings.warn(f"OnExceptionCheckpoint could not save to {self.ckpt_path} after "
                          f"{type(exception).__name__}: {type(error).__name__}: {error}", RuntimeWarning, stacklevel=2)
            return
        print(f"OnExceptionCheckpoint: {type(exception).__name__} at step {trainer.global_step} (epoch "
              f"{trainer.current_epoch}); saved {self.ckpt_path}. Resume with "
              f"trainer.fit(..., ckpt_path={self.ckpt_path!r}).", file=sys.stderr, flush=True)

    def teardown(self, trainer: TrainerView, module: Any, stage: str) -> None:
        if stage != "fit":
            return
        finished = not self._failed
        self._training = self._failed = False
        if finished and trainer.is_global_zero and os.path.isdir(self.ckpt_path):
            remove_folder(self.ckpt_path)  # renamed aside first: never a half-deleted folder under the name
