"""One writer per checkpoint folder: a lock file that names the run holding the folder.

Owns: the lock of a checkpoint folder, ``.{name}.stoker-lock`` beside it (where a save's temporary
``.{name}.stoker-tmp`` folders go too, so that the folder itself holds only checkpoints), holding the holder's host, process id, the process's start time
(so a reused process id is not mistaken for the holder) and the boot it belongs to. A run takes the lock before
its first write into the folder and gives it back when it ends (at ``Trainer.fit``'s end, ``end_training()`` or
interpreter exit). A second live run that asks for the folder gets :class:`FolderInUseError` naming the holder.
A lock whose holder is provably gone (same host, and that process no longer exists, or the machine rebooted since)
is taken over; a holder on another host cannot be checked from here, so its lock stands until it is removed by
hand (the message says which file). Does not own what is written into the folder (``checkpoint.py``,
``ModelCheckpoint``).
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import threading
import time
from typing import Any

LOCK_SUFFIX = ".stoker-lock"


def lock_path(folder: str) -> str:
    """Where the lock of ``folder`` lives: ``.{name}.stoker-lock`` beside it."""
    parent, name = os.path.split(os.path.abspath(folder))
    return os.path.join(parent, f".{name}{LOCK_SUFFIX}")


class FolderInUseError(RuntimeError):
    """Another live run holds the checkpoint folder."""


def _boot_id() -> str | None:
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as f:
            return f.read().strip()
    except OSError:
        return None


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), or None where /proc does not tell."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by another user
    return True


def this_process() -> dict[str, Any]:
    """The record a lock taken by this process holds."""
    pid = os.getpid()
    return {"host": socket.gethostname(), "pid": pid, "start": _start_time(pid), "boot": _boot_id(),
            "since": time.strftime("%Y-%m-%d %H:%M:%S", time.localtime())}


def holder_is_gone(holder: dict[str, Any]) -> bool:
    """True only where it is certain: same host, and the machine rebooted or the process no longer exists (or its
    process id now belongs to a process started at another time)."""
    if holder.get("host") != socket.gethostname():
        return False
    if holder.get("boot") and _boot_id() and holder["boot"] != _boot_id():
        return True
    pid = holder.get("pid")
    if not isinstance(pid, int) or pid <= 0:
        return True  # not a lock this module wrote: nothing holds it
    if not _alive(pid):
        return True
    start = _start_time(pid)
    return holder.get("start") is not None and start is not None and start != holder["start"]


def read_holder(folder: str) -> dict[str, Any] | None:
    """The record in ``folder``'s lock, None when the folder is free; a lock that cannot be read counts as the
    record of nobody (an empty dict), which :func:`holder_is_gone` treats as gone."""
    try:
        with open(lock_path(folder), encoding="utf-8") as f:
            record = json.load(f)
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def describe(holder: dict[str, Any]) -> str:
    return (f"process {holder.get('pid')} on {holder.get('host')!r} (holding it since {holder.get('since')})"
            if holder else "an unreadable lock")


def _other_live_holder(folder: str) -> dict[str, Any] | None:
    """The record of the live run other than this process that holds ``folder``, or None."""
    holder = read_holder(folder)
    if holder is None or holder_is_gone(holder) or _is_self(holder):
        return None
    return holder


def is_held_by_another_run(folder: str) -> bool:
    """Whether a live run other than this process holds ``folder`` (``ckpt_path="last"`` skips such folders)."""
    return _other_live_holder(folder) is not None


def check_folder_free(folder: str, what: str) -> None:
    """Raises :class:`FolderInUseError` (``what`` begins the message) when a live run other than this process holds
    ``folder``: a resume must not take the checkpoints of a run that is still writing them."""
    holder = _other_live_holder(os.path.abspath(folder))
    if holder is not None:
        raise FolderInUseError(f"{what} {os.path.abspath(folder)} is in use by another run: {describe(holder)}. "
                               "Resuming it would continue a run that is still going; wait for it to finish, or "
                               "pass that run a ckpt_path of its own.")


def _is_self(holder: dict[str, Any]) -> bool:
    me = this_process()
    return holder.get("host") == me["host"] and holder.get("pid") == me["pid"] and holder.get("start") == me["start"]


class FolderLock:
    """Holds checkpoint folders for one run; re-entrant per folder within this process.

    Example:
        >>> locks = FolderLock()
        >>> locks.acquire("runs/exp/checkpoints")   # FolderInUseError if another live run writes there
        >>> locks.release_all()                     # at the end of the run
    """

    def __init__(self) -> None:
        self._held: set[str] = set()
        self._lock = threading.Lock()
        self._at_exit = False  # release_all registered to run at interpreter exit

    def holds(self, folder: str) -> bool:
        return os.path.abspath(folder) in self._held

    def acquire(self, folder: str) -> None:
        """Takes ``folder`` for this run (creating it), or raises :class:`FolderInUseError`."""
        folder = os.path.abspath(folder)
        with self._lock:
            if folder in self._held:
                return
            os.makedirs(folder, exist_ok=True)
            for _ in range(5):  # a race with another run taking over the same stale lock: look again
                if self._try_create(folder):
                    self._held.add(folder)
                    if not self._at_exit:  # a script that never calls end_training() gives it back at exit
                        self._at_exit = True
                        atexit.register(self.release_all)
                    return
                holder = read_holder(folder)
                if holder is None:
                    continue  # released meanwhile
                if _is_self(holder):  # this process took it through another FolderLock (another Accelerator)
                    return
                if not holder_is_gone(holder):
                    raise FolderInUseError(_in_use_message(folder, holder))
                self._take_over(folder)
            raise FolderInUseError(f"Could not take the checkpoint folder {folder}: its lock changed hands "
                                   f"repeatedly. Another run is starting on it; give this run another folder.")

    def release_all(self) -> None:
        """Gives back every folder this object holds (only locks that still name this process are removed)."""
        with self._lock:
            held, self._held = self._held, set()
        for folder in held:
            holder = read_holder(folder)
            if holder is not None and _is_self(holder):
                try:
                    os.remove(lock_path(folder))
                except FileNotFoundError:
                    pass

    @staticmethod
    def _try_create(folder: str) -> bool:
        path = lock_path(folder)
        tmp = f"{path}.{os.getpid()}-{os.urandom(4).hex()}"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(this_process(), f)
        try:
            os.link(tmp, path)  # atomic: fails if a lock is there, and the lock is complete when it appears
            return True
        except FileExistsError:
            return False
        finally:
            os.remove(tmp)

    @staticmethod
    def _take_over(folder: str) -> None:
        """Moves a dead holder's lock aside (one taker wins the rename; the others find the new lock)."""
        path = lock_path(folder)
        stale = f"{path}.stale-{os.urandom(4).hex()}"
        try:
            os.rename(path, stale)
        except FileNotFoundError:
            return
        os.remove(stale)


def _in_use_message(folder: str, holder: dict[str, Any]) -> str:
    remote = holder.get("host") != socket.gethostname()
    check = ("it runs on another machine, so stoker cannot tell whether it is still alive: if it is gone, delete "
             f"{lock_path(folder)}" if remote else "wait for it to finish")
    return (f"The checkpoint folder {folder} is in use by another run: {describe(holder)}. Two runs writing one "
            f"folder would delete each other's checkpoints. Give this run another folder (ModelCheckpoint(dirpath="
            f"...), Trainer(default_root_dir=...) or ProjectConfiguration(project_dir=...)), or {check}.")
