"""Checkpoint work that need not hold up training: deleting replaced folders, parallel fsyncs, asynchronous saves.

Owns: :class:`CheckpointIO`, one per Accelerator (made on first use by ``Accelerator.checkpoint_io`` and kept on the
instance, so two Accelerators never share one), with

- a deleter: a folder that a save replaced, rotated out or evicted is first *renamed* aside to a trash name
  (``.{name}.stoker-del-{token}``, hidden, so neither ``load_state`` nor a ``"last"`` lookup ever takes it for a
  checkpoint), then deleted by a worker thread. Deleting is the slow part (each unlink costs milliseconds on a
  disk mounted with ``discard``); the rename costs microseconds. Trash left by a crash is deleted at the next
  save into the same folder (:func:`sweep_trash`).
- a small pool, for the length of one call, that fsyncs many files at once (the file system folds their journal
  commits into one);
- a saver: one worker that finishes ``save_state(..., async_save=True)`` and the commits of
  ``save_state(..., background_commit=True)`` in order (:meth:`CheckpointIO.in_background` chooses either for the
  saves made inside it).

:meth:`CheckpointIO.wait` is the barrier: the next save, a load, ``end_training()`` and the end of
``Trainer.fit`` call it. Worker threads start only when there is work; pending deletions also finish at
interpreter exit (the executors' workers are joined then). Does not own *which* folders may go or when: that is
``atomic.py`` and the callers, which discard a folder only after the checkpoint replacing it is complete.
"""

from __future__ import annotations

import os
import re
import shutil
import threading
from contextlib import contextmanager
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from .folder_lock import FolderLock
from .safetensors_io import fsync_path as _fsync

TRASH_RE = re.compile(r"\..+\.stoker-del-[0-9a-f]+")


_ASIDE_RE = re.compile(r"\.(.+)\.stoker-(?:tmp|old|del)(?:-[0-9a-f]+)?")


def trash_path(path: str) -> str:
    """A fresh hidden name beside ``path`` for a folder about to be deleted: ``.{name}.stoker-del-{token}``, where
    ``name`` is the checkpoint's (``path`` may be its temporary ``.{name}.stoker-tmp`` after a swap)."""
    parent, name = os.path.split(os.path.abspath(path))
    match = _ASIDE_RE.fullmatch(name)
    return os.path.join(parent, f".{match.group(1) if match else name}.stoker-del-{os.urandom(6).hex()}")


def _remove(path: str) -> None:
    """Best effort, never raises: what cannot be deleted now stays hidden trash for the next save's sweep."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.remove(path)
        except OSError:
            pass


class CheckpointIO:
    """Background checkpoint I/O of one Accelerator (see the module docstring).

    Example:
        >>> io = accelerator.checkpoint_io
        >>> io.discard("runs/exp/checkpoints/epoch=1")   # gone from its name now, from the disk soon
        >>> io.wait()                                    # all pending saves and deletions done
    """

    def __init__(self) -> None:
        self.pid = os.getpid()  # a forked child gets a copy without the worker threads: it needs its own
        self._lock = threading.Lock()
        self._deleting: dict[str, Future] = {}
        self._deleter: ThreadPoolExecutor | None = None
        self._saver: ThreadPoolExecutor | None = None
        self._saving: Future | None = None
        self.mode: str | None = None  # set by :meth:`in_background` for the saves made inside it
        self.locks = FolderLock()  # the checkpoint folders this Accelerator's run writes (one writer per folder)

    # -- deletions ----------------------------------------------------------------------------------------------
    def discard(self, path: str) -> str | None:
        """Renames ``path`` to a trash name now and deletes it in the background; returns the trash path.

        Once this returns, nothing is left under ``path``: a crash can only leave hidden trash behind.
        """
        if not os.path.lexists(path):
            return None
        trash = trash_path(path)
        os.rename(path, trash)
        self.delete_later(trash)
        return trash

    def delete_later(self, trash: str) -> None:
        """Deletes ``trash`` (already renamed aside) in the background, unless that is already under way."""
        with self._lock:
            if trash in self._deleting:
                return
            if self._deleter is None:
                self._deleter = ThreadPoolExecutor(1, thread_name_prefix="stoker-delete")
            future = self._deleter.submit(_remove, trash)
            self._deleting[trash] = future
        future.add_done_callback(lambda _, t=trash: self._forget(t))

    def _forget(self, trash: str) -> None:
        with self._lock:
            self._deleting.pop(trash, None)

    def is_deleting(self, trash: str) -> bool:
        with self._lock:
            return trash in self._deleting

    # -- durability ---------------------------------------------------------------------------------------------
    def fsync(self, paths: Iterable[str]) -> None:
        """fsyncs every path (files or folders) at once and waits for all of them."""
        paths = list(paths)
        if len(paths) <= 1:
            for path in paths:
                _fsync(path)
            return
        # A pool for this call only: its threads are gone when the save returns (none idles after a last save).
        with ThreadPoolExecutor(min(8, len(paths)), thread_name_prefix="stoker-fsync") as syncer:
            for future in [syncer.submit(_fsync, p) for p in paths]:
                future.result()

    # -- asynchronous saves -------------------------------------------------------------------------------------
    def submit_save(self, job: Callable[[], Any]) -> Future:
        """Runs ``job`` on the saver thread after every earlier save; :meth:`wait` raises its error, if any."""
        self.wait_for_save()
        with self._lock:
            if self._saver is None:
                self._saver = ThreadPoolExecutor(1, thread_name_prefix="stoker-save")
            self._saving = future = self._saver.submit(job)
        return future

    def after_save(self, job: Callable[[], Any]) -> None:
        """Runs ``job`` on the saver thread once the save in flight is committed (now, without one). When that
        save failed, ``job`` does not run and :meth:`wait` raises the save's error."""
        previous = self._saving
        if previous is None:
            job()
            return

        def follow() -> None:
            previous.result()  # the saver runs jobs in order: done; raises the save's error (job skipped)
            job()

        with self._lock:
            self._saving = self._saver.submit(follow)

    @contextmanager
    def in_background(self, copy: bool = False) -> Iterator[None]:
        """``save_state`` calls inside this block finish in the background, as with ``async_save=True`` when
        ``copy`` is set, else as with ``background_commit=True`` (under the same conditions: one process, a
        strategy that saves in the background; otherwise they stay synchronous). Lets a caller that saves
        through another layer (``ModelCheckpoint`` through ``Trainer.save_checkpoint``) choose how."""
        previous, self.mode = self.mode, "copy" if copy else "commit"
        try:
            yield
        finally:
            self.mode = previous

    def wait_for_save(self) -> None:
        """Waits for the asynchronous save in flight, if any; re-raises its error here (once)."""
        future, self._saving = self._saving, None
        if future is not None:
            future.result()

    def wait(self) -> None:
        """Waits for the asynchronous save in flight and every pending deletion, then ends the idle worker
        threads (the next piece of work starts them again: a few threads per save, against a test harness or an
        embedding program that finds threads left running after ``fit``)."""
        try:
            self.wait_for_save()
        finally:
            with self._lock:
                pending = list(self._deleting.values())
            for future in pending:
                future.result()
            self._end_workers()

    def _end_workers(self) -> None:
        with self._lock:
            if self._saving is not None or self._deleting:
                return  # new work arrived meanwhile (another thread): its workers stay
            workers = [w for w in (self._deleter, self._saver) if w is not None]
            self._deleter = self._saver = None
        for worker in workers:
            worker.shutdown(wait=True)


def sweep_trash(folder: str, io: CheckpointIO | None = None) -> None:
    """Deletes trash that a crash left in ``folder`` (in the background with ``io``; skips what ``io`` already
    deletes)."""
    try:
        names = os.listdir(folder)
    except (FileNotFoundError, NotADirectoryError):
        return
    for name in names:
        if TRASH_RE.fullmatch(name):
            path = os.path.join(folder, name)
            if io is None:
                _remove(path)
            elif not io.is_deleting(path):
                io.delete_later(path)
