"""What a checkpoint's file work costs the training loop when it runs elsewhere: on a thread, in another process.

A per-epoch ``ModelCheckpoint`` leaves its commit (fsyncs, renames) and the deletion of replaced folders to
background threads. ``step_times.py`` shows the steps after an epoch's end running slower while that happens.
Is that the interpreter lock (the background thread runs Python between its system calls, and the training thread
waits for the lock) or the file system work itself (the kernel's journal commits and the virtual disk's flushes
running on the same two cores)? This script separates the two. At every epoch's end of a bare ``Trainer.fit``
(the tiny MLP of ``overhead.py``, 300-step epochs) it starts the same file work as a small checkpoint's
background half: write 9 files of 3 KB into a new folder, fsync them, rename the folder, hard-link its files
elsewhere, delete both. Modes:

- ``none``: no file work (the baseline);
- ``thread``: the work on a new thread of the training process (as stoker's checkpoint I/O does it);
- ``process``: the same work in a helper process started before the fit (no shared interpreter lock; the training
  process only writes one line to a pipe);
- ``thread-nofsync``: ``thread`` without the 9 fsyncs;
- ``thread-syncfs``: ``thread`` with one ``syncfs`` (the whole file system) in place of the 9 fsyncs (Linux).

For each mode it reports, in microseconds beyond the median interval in the middle of the epochs (step intervals
as in ``step_times.py``): ``edge``, the interval holding the epoch's end; ``after-edge``, the next 80 intervals
summed. Each mode runs in its own process, in turns, ``--repeat`` times; the table shows medians.

Run:
    python benchmarks/fsync_interference.py --repeat 3
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from step_times import command_line, intervals  # noqa: E402

MODES = ("none", "thread", "process", "thread-nofsync", "thread-syncfs")
FILES = 9


def file_work(root: str, tag: str, fsync: str = "each") -> None:
    """A small checkpoint's background file work in ``root`` (``fsync``: ``each`` file, ``none``, ``syncfs``)."""
    folder = os.path.join(root, f"w{tag}")
    os.makedirs(folder)
    for i in range(FILES):
        with open(os.path.join(folder, f"f{i}"), "wb") as f:
            f.write(b"x" * 3000)
    if fsync == "each":
        for i in range(FILES):
            fd = os.open(os.path.join(folder, f"f{i}"), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
    elif fsync == "syncfs":
        import ctypes

        fd = os.open(folder, os.O_RDONLY)
        try:
            ctypes.CDLL(None, use_errno=True).syncfs(fd)
        finally:
            os.close(fd)
    os.rename(folder, folder + ".old")
    for i in range(FILES):
        os.link(os.path.join(folder + ".old", f"f{i}"), os.path.join(root, f"l{tag}_{i}"))
    shutil.rmtree(folder + ".old")
    for i in range(FILES):
        os.unlink(os.path.join(root, f"l{tag}_{i}"))


def helper_process(root: str) -> None:
    """The ``process`` mode's helper: one ``file_work`` per line read, then ``ok``."""
    for line in sys.stdin:
        file_work(root, line.strip())
        print("ok", flush=True)


def measure(mode: str, epochs: int) -> dict[str, float]:
    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import overhead

    from stoker import Callback, Trainer

    torch.set_num_threads(1)
    root = tempfile.mkdtemp(prefix="fsync-interference-")
    helper = None
    if mode == "process":
        helper = subprocess.Popen([sys.executable, __file__, "--helper", root], stdin=subprocess.PIPE,
                                  stdout=subprocess.PIPE, text=True)
    w = overhead.WORKLOADS["tiny-300"]
    steps = w.steps

    class Clock(Callback):
        def __init__(self) -> None:
            self.times: list[float] = []
            self.epochs = 0

        def on_train_batch_end(self, *args: object) -> None:
            self.times.append(time.perf_counter())

        def on_train_epoch_end(self, *args: object) -> None:
            self.epochs += 1
            tag = str(self.epochs)
            if mode.startswith("thread"):
                fsync = {"thread": "each", "thread-nofsync": "none", "thread-syncfs": "syncfs"}[mode]
                threading.Thread(target=file_work, args=(root, tag, fsync)).start()
            elif helper is not None:
                helper.stdin.write(tag + "\n")
                helper.stdin.flush()
                threading.Thread(target=helper.stdout.readline).start()  # the reply, read off this thread

    clock = Clock()
    trainer = Trainer(max_epochs=epochs, accelerator="cpu", default_root_dir=root, logger=False,
                      enable_progress_bar=False, enable_checkpointing=False, enable_model_summary=False,
                      callbacks=[clock])
    trainer.fit(overhead.trainer_module(w, log=False), w.make_loader())
    if helper is not None:
        helper.stdin.close()
        helper.wait()
    shutil.rmtree(root, ignore_errors=True)
    durations, numbers, middle = intervals(clock.times, steps)

    def excess(k: int) -> float:
        return statistics.mean(d for d, n in zip(durations, numbers) if n % steps == k) - middle

    return {"middle step": middle, "edge": excess(0), "after-edge": sum(excess(k) for k in range(1, 81))}


def main() -> None:
    if sys.argv[1:2] == ["--helper"]:  # internal: the process mode's helper
        helper_process(sys.argv[2])
        return
    command_line(__file__, __doc__.splitlines()[0], measure, "mode", MODES, 16, "tiny-300, bare Trainer")


if __name__ == "__main__":
    main()
