"""How one `ModelCheckpoint` save lands on disk, in an order that never loses the newest complete state.

Owns, for a save that `ModelCheckpoint` has decided on (its folder names and the checkpoints it evicts):

1. the new folder: a full ``save_state`` checkpoint (``trainer.save_checkpoint``), or with ``save_weights_only`` a
   weights folder (``save_model`` of the unwrapped module plus ``hparams.json``, appearing complete or not at all);
2. with ``export_weights``, the same weights under ``{dirpath}/weights/{name}``;
3. ``last`` as a hard-linked copy of a new top-k folder (no second write);
4. only then, the removal of the evicted checkpoints (and their exported weights), by the background deleter.

In one process (full checkpoints, no exported weights) step 1 writes the files and leaves their commit (fsyncs,
rename into place) to the Accelerator's saver thread (``save_state(background_commit=True)``; with ``async_save``,
``save_state(async_save=True)``: a copy, written there too), and steps 3-4 run on the saver thread once it has
committed. Everything else is collective: every process calls :meth:`CheckpointWriter.write`.

Does not own when to save, the names or which checkpoints to keep (`ModelCheckpoint`, checkpoint.py), nor the folder
operations themselves (the Accelerator's ``copy_checkpoint``, ``remove_checkpoint``, ``save_model_folder``, ...).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from stoker.callbacks.checkpoint_files import EXTENSION, LAST_NAME, WEIGHTS_DIR
from stoker.callbacks.hparams_file import write_hparams

if TYPE_CHECKING:
    import torch

    from stoker.accelerator import Accelerator

__all__ = ["CheckpointWriter"]


class Saving(Protocol):
    """What the writer uses of the Trainer (a callback's layer cannot import the Trainer's class)."""

    accelerator: Accelerator
    is_global_zero: bool
    module: torch.nn.Module

    def save_checkpoint(self, path: str) -> str: ...


@dataclass(frozen=True)
class CheckpointWriter:
    """Writes the folders of one save under ``dirpath`` (the callback's options at the time of the save).

    Example:
        >>> writer = CheckpointWriter("/runs/checkpoints", save_last=True)          # doctest: +SKIP
        >>> writer.write(trainer, "/runs/checkpoints/epoch=3-step=400.ckpt", evicted=[])  # doctest: +SKIP
    """

    dirpath: str
    save_last: bool = True
    export_weights: bool = False
    save_weights_only: bool = False
    async_save: bool = False
    last_name: str = LAST_NAME + EXTENSION

    @property
    def last_path(self) -> str:
        return os.path.join(self.dirpath, self.last_name)

    def weights_path(self, checkpoint_path: str) -> str:
        """Where ``export_weights`` puts the weights of the checkpoint at ``checkpoint_path``."""
        return os.path.join(self.dirpath, WEIGHTS_DIR, os.path.basename(checkpoint_path))

    def write(self, trainer: Saving, topk_path: str | None, evicted: list[str], wait: bool = False) -> None:
        """Saves (top-k folder and/or last), then deletes ``evicted``; collective across processes. Unless
        ``wait``, in one process the commit (with ``async_save`` also the writing), ``last`` and the deletions
        finish in the background."""
        accelerator = trainer.accelerator
        last = self.last_path
        first = topk_path or last
        if not wait and self.in_background(accelerator):  # one process: the follow-up needs no barrier
            # async_save: a copy now, written meanwhile; otherwise written now, made durable meanwhile.
            with accelerator.checkpoints_in_background(copy=self.async_save):
                trainer.save_checkpoint(first)  # its checks too (no checkpoint after an unchecked NaN loss)
            accelerator.after_checkpoint(lambda: self._after_save(topk_path, evicted, accelerator))
            return
        if self.save_weights_only:
            self._write_weights(trainer, first)
        else:
            trainer.save_checkpoint(first)
            if self.export_weights:
                self._export(trainer, first)
        if topk_path is not None and self.save_last:
            if trainer.is_global_zero:  # a hard-linked copy: last is the same complete state, no second write
                accelerator.copy_checkpoint(topk_path, last)
                if self.export_weights:
                    accelerator.copy_checkpoint(self.weights_path(topk_path), self.weights_path(last))
            accelerator.wait_for_everyone()
        if trainer.is_global_zero:  # only now that everything new is complete
            self._remove(evicted, accelerator)
        accelerator.wait_for_everyone()

    def in_background(self, accelerator: Accelerator) -> bool:
        """Whether a save finishes in the background (its commit; with ``async_save`` also its writing): one
        process and nothing that must be written beside the checkpoint (weights). ``save_state`` itself stays
        synchronous where the strategy cannot save in the background (FSDP)."""
        return not self.export_weights and not self.save_weights_only and accelerator.num_processes == 1

    def _after_save(self, topk_path: str | None, evicted: list[str], accelerator: Accelerator) -> None:
        """What follows a background save once it is committed (on the saver thread): ``last``, evictions."""
        if topk_path is not None and self.save_last:
            accelerator.copy_checkpoint(topk_path, self.last_path)
        self._remove(evicted, accelerator)

    def _remove(self, evicted: list[str], accelerator: Accelerator) -> None:
        for path in evicted:  # replaced and evicted folders are deleted in the background
            accelerator.remove_checkpoint(path)
            accelerator.remove_checkpoint(self.weights_path(path))

    def _export(self, trainer: Saving, checkpoint_path: str) -> None:
        target = self.weights_path(checkpoint_path)
        if trainer.is_global_zero:
            trainer.accelerator.sweep_checkpoint_trash(os.path.dirname(target))  # a crash's leftovers
        self._write_weights(trainer, target)

    def _write_weights(self, trainer: Saving, target: str) -> None:
        """``save_model`` of the unwrapped module into ``target``, which appears complete or not at all; with
        ``hparams.json``, from which load_from_checkpoint rebuilds the module."""
        module = trainer.module
        trainer.accelerator.save_model_folder(module, target, extra=lambda folder: write_hparams(module, folder))
