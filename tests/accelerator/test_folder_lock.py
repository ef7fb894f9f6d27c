"""One writer per checkpoint folder: the lock names its holder, a live holder keeps it, a dead one loses it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from stoker.accelerator.checkpointing.folder_lock import (FolderInUseError, FolderLock, is_held_by_another_run,
                                                         lock_path, this_process)

HOLD = """
import sys, time
from stoker.accelerator.checkpointing.folder_lock import FolderLock
FolderLock().acquire(sys.argv[1])
print("held", flush=True)
time.sleep(60)
"""


def _hold_in_another_process(folder: Path) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])})
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def _write_lock(folder: Path, **changes: object) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    Path(lock_path(str(folder))).write_text(json.dumps({**this_process(), **changes}))


def test_a_second_live_run_is_refused_with_the_holder_named(tmp_path: Path) -> None:
    proc = _hold_in_another_process(tmp_path)
    try:
        assert is_held_by_another_run(str(tmp_path))
        with pytest.raises(FolderInUseError, match=rf"{tmp_path} is in use by another run: process {proc.pid} on "
                                                   r".*another folder .*dirpath=.*or wait for it to finish"):
            FolderLock().acquire(str(tmp_path))
    finally:
        proc.kill()
        proc.wait()
    # The holder is gone now (killed, its lock left behind): the folder is taken over.
    assert not is_held_by_another_run(str(tmp_path))
    FolderLock().acquire(str(tmp_path))
    assert json.loads(Path(lock_path(str(tmp_path))).read_text())["pid"] == os.getpid()


def test_a_reused_process_id_does_not_keep_a_dead_run_s_lock(tmp_path: Path) -> None:
    _write_lock(tmp_path, start="1")  # our own pid, but a process started at another time
    assert not is_held_by_another_run(str(tmp_path))
    FolderLock().acquire(str(tmp_path))


def test_a_lock_from_another_machine_stands_and_the_message_says_which_file_to_delete(tmp_path: Path) -> None:
    _write_lock(tmp_path, host="another-host", pid=12345)
    with pytest.raises(FolderInUseError, match=rf"process 12345 on 'another-host'.*delete "
                                               rf"{lock_path(str(tmp_path))}"):
        FolderLock().acquire(str(tmp_path))
    assert is_held_by_another_run(str(tmp_path))


def test_release_gives_the_folder_back_and_acquire_is_reentrant(tmp_path: Path) -> None:
    locks = FolderLock()
    locks.acquire(str(tmp_path / "ckpts"))
    locks.acquire(str(tmp_path / "ckpts"))
    FolderLock().acquire(str(tmp_path / "ckpts"))  # another Accelerator of this same process: the same run
    assert locks.holds(str(tmp_path / "ckpts"))
    locks.release_all()
    assert not Path(lock_path(str(tmp_path / "ckpts"))).exists()
    assert [p.name for p in tmp_path.iterdir()] == ["ckpts"] and list((tmp_path / "ckpts").iterdir()) == []


def test_release_leaves_a_lock_that_another_run_took_over(tmp_path: Path) -> None:
    locks = FolderLock()
    locks.acquire(str(tmp_path))
    _write_lock(tmp_path, pid=1, start="other")  # taken over meanwhile (by hand, or by a run after a reboot)
    locks.release_all()
    assert Path(lock_path(str(tmp_path))).exists()
