"""How one `ModelCheckpoint` save lands on disk, in an order that never loses the newest complete state.

Owns, for a save that `ModelCheckpoint` has decided on (its folder names and the checkpoints it evicts):

1. the new folder: a full ``save_state`` checkpoint (``trainer.save_checkpoint``), or with ``save_weights_only`` a
   weights folder (``save_model`` of the unwrapped module plus ``hparams.json``, appearing complete or not at all);
2. with ``export_weights``, the same weights under ``{dirpath}/weights/{name}``;
3. ``last`` as a hard-linked copy of a new top-k folder (no second write);
4. only then, the removal of the evicted checkpoints (and their exported weights), by the background deleter;
5. around all of it, the eviction record that lets the next start finish a removal a killed process never made.

In one process (full checkpoints, no exported weights) step 1 writes the files and leaves their commit (fsyncs,
rename into place) to the Accelerator's saver thread (``save_state(background_commit=True)``; with ``async_save``,
``save_state(async_save=True)``: a copy, written there too), and steps 3-4 run on the saver thread once it has
committed. Everything else is collective: every process calls :meth:`CheckpointWriter.write`.

**The eviction record.** A save that evicts first writes, durably, ``.{new}.stoker-evict`` beside the new folder:
the evicted names, the callback (its ``state_key``) and which folder stood under the new name before (none, or its
device and inode). The new folder's commit is what makes the eviction due; the record goes once the evicted folders
have left their names. A kill in between leaves it, and :func:`finish_evictions` (the callback's next start on the
folder) reads it: a folder under the new name other than the recorded one is the commit, so the removal is
finished; no folder or the recorded one means the commit never happened, the evicted folders are still the kept
set's, and only the record goes. So ``kill -9`` at any point leaves the old set or the new one plus a record, never a
folder that no one removes. Only names a record lists are removed, never one the restored state keeps.

Does not own when to save, the names or which checkpoints to keep (`ModelCheckpoint`, checkpoint.py), nor the folder
operations themselves (the Accelerator's ``copy_checkpoint``, ``remove_checkpoint``, ``save_model_folder``, ...).
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from stoker.callbacks.checkpoint_files import EXTENSION, LAST_NAME, WEIGHTS_DIR

if TYPE_CHECKING:
    import torch

    from stoker.accelerator import Accelerator

__all__ = ["CheckpointWriter", "finish_evictions"]

EVICT_SUFFIX = ".stoker-evict"  # ``.{new checkpoint}.stoker-evict``; hidden, so no listing takes it for a checkpoint


class Saving(Protocol):
    """What the writer uses of the Trainer (a callback's layer cannot import the Trainer's class)."""

    accelerator: Accelerator
    is_global_zero: bool
    module: torch.nn.Module

    def save_checkpoint(self, path: str, weights_only: bool = False) -> str: ...


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
    owner: str = ""  # the callback's state_key, written into eviction records: a start finishes only its own

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
        if evicted and topk_path is not None and trainer.is_global_zero:  # before anything of the new save lands
            _write_record(topk_path, evicted, self.owner)
        if not wait and self.in_background(accelerator):  # one process: the follow-up needs no barrier
            # async_save: a copy now, written meanwhile; otherwise written now, made durable meanwhile.
            with accelerator.checkpoints_in_background(copy=self.async_save):
                trainer.save_checkpoint(first, False)  # its checks too (no checkpoint after an unchecked NaN loss)
            accelerator.after_checkpoint(lambda: self._after_save(topk_path, evicted, accelerator))
            return
        trainer.save_checkpoint(first, self.save_weights_only)  # weights only: the module and its hparams.json
        if self.export_weights and not self.save_weights_only:
            self._export(trainer, first)
        if topk_path is not None and self.save_last:
            if trainer.is_global_zero:  # a hard-linked copy: last is the same complete state, no second write
                accelerator.copy_checkpoint(topk_path, last)
                if self.export_weights:
                    accelerator.copy_checkpoint(self.weights_path(topk_path), self.weights_path(last))
            accelerator.wait_for_everyone()
        if trainer.is_global_zero:  # only now that everything new is complete
            self._remove(topk_path, evicted, accelerator)
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
        self._remove(topk_path, evicted, accelerator)

    def _remove(self, topk_path: str | None, evicted: list[str], accelerator: Accelerator) -> None:
        for path in evicted:  # replaced and evicted folders are deleted in the background
            accelerator.remove_checkpoint(path)
            accelerator.remove_checkpoint(self.weights_path(path))
        if evicted and topk_path is not None:  # every evicted folder has left its name: nothing left to finish
            _drop_record(_record_path(topk_path))

    def _export(self, trainer: Saving, checkpoint_path: str) -> None:
        target = self.weights_path(checkpoint_path)
        if trainer.is_global_zero:
            trainer.accelerator.sweep_checkpoint_trash(os.path.dirname(target))  # a crash's leftovers
        trainer.save_checkpoint(target, True)  # the module's weights and hparams.json


# -- the eviction record (module docstring) --------------------------------------------------------------------------
def _record_path(checkpoint_path: str) -> str:
    parent, name = os.path.split(os.path.abspath(checkpoint_path))
    return os.path.join(parent, f".{name}{EVICT_SUFFIX}")


def _identity(path: str) -> list[int] | None:
    """Which folder stands under ``path`` (device, inode); None when none. A committed folder is a new inode: it is
    renamed into place while the folder it replaces still exists, so the two cannot share one."""
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return [stat.st_dev, stat.st_ino]


def _fsync_dir(folder: str) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:  # some platforms cannot open folders; the rename is as durable as they make it
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _write_record(checkpoint_path: str, evicted: list[str], owner: str) -> None:
    """Durably records, before ``checkpoint_path`` is committed, that its commit evicts ``evicted``."""
    folder = os.path.dirname(os.path.abspath(checkpoint_path))
    names = [os.path.basename(p) for p in evicted if os.path.dirname(os.path.abspath(p)) == folder]
    record = {"owner": owner, "before": _identity(checkpoint_path), "evict": names}
    path = _record_path(checkpoint_path)
    tmp = f"{path}-tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(record, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)  # the record is whole or absent
    _fsync_dir(folder)


def _drop_record(path: str) -> None:
    """Removes a finished record, durably: one that came back after a crash could name a folder that a later save
    gave the same name."""
    try:
        os.remove(path)
    except FileNotFoundError:
        return
    _fsync_dir(os.path.dirname(path))


_RESERVED = (WEIGHTS_DIR, LAST_NAME + EXTENSION)  # never a top-k folder's name


def _read_record(path: str) -> dict | None:
    """The record at ``path`` if it is one this module wrote (plain names only), else None (left alone)."""
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or not isinstance(record.get("owner"), str):
        return None
    before, names = record.get("before"), record.get("evict")
    if before is not None and not (isinstance(before, list) and all(type(v) is int for v in before)):
        return None
    plain = isinstance(names, list) and all(
        isinstance(n, str) and n and n == os.path.basename(n) and n[0] != "." and n not in _RESERVED for n in names)
    return record if plain else None


def finish_evictions(trainer: Saving, dirpath: str, owner: str, keep: Iterable[str]) -> list[str]:
    """Finishes the evictions that a killed process left in ``dirpath`` (main process; call it once the run holds
    the folder, before its first save there). Reads only the records of ``owner`` (the callback's ``state_key``);
    never removes a path in ``keep`` (the restored top-k, ``last``). Returns the folders removed.

    Example:
        >>> finish_evictions(trainer, "/runs/checkpoints", callback.state_key, callback.best_k_models)  # doctest: +SKIP
        ['/runs/checkpoints/epoch=0-step=4.ckpt']
    """
    try:
        names = sorted(os.listdir(dirpath)) if trainer.is_global_zero else []
    except (FileNotFoundError, NotADirectoryError):
        return []
    kept = {os.path.abspath(p) for p in keep if p}
    removed: list[str] = []
    for name in names:
        path = os.path.join(dirpath, name)
        if name.startswith(".") and name.endswith(EVICT_SUFFIX + "-tmp"):
            os.remove(path)  # a record never completed: its save had not begun
            continue
        record = _read_record(path) if name.startswith(".") and name.endswith(EVICT_SUFFIX) else None
        if record is None or record["owner"] != owner:
            continue
        new = os.path.join(dirpath, name[1:-len(EVICT_SUFFIX)])
        if _identity(new) not in (None, record["before"]):  # the new folder was committed: the eviction is due
            for evicted in record["evict"]:
                target = os.path.join(dirpath, evicted)
                if target in kept or target == new or not os.path.lexists(target):
                    continue
                trainer.accelerator.remove_checkpoint(target)
                trainer.accelerator.remove_checkpoint(os.path.join(dirpath, WEIGHTS_DIR, evicted))
                removed.append(target)
        _drop_record(path)
    if removed:
        print(f"stoker: ModelCheckpoint removed {', '.join(os.path.basename(p) for p in removed)} from {dirpath}: "
              "a save had evicted it from the top-k just before the process was killed.", file=sys.stderr, flush=True)
    return removed
