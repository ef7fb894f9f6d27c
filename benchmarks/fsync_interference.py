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

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time

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
    first = 2 * steps
    durations = [(b - a) * 1e6 for a, b in zip(clock.times[first - 1:], clock.times[first:])]
    numbers = range(first, first + len(durations))
    middle = statistics.median(d for d, n in zip(durations, numbers) if 100 < n % steps < steps - 20)

    def excess(k: int) -> float:
        return statistics.mean(d for d, n in zip(durations, numbers) if n % steps == k) - middle

    return {"middle step": middle, "edge": excess(0), "after-edge": sum(excess(k) for k in range(1, 81))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--epochs", type=int, default=16)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--helper", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.helper:
        helper_process(args.helper)
        return
    if args.one:
        print(json.dumps(measure(args.one, args.epochs)))
        return
    modes = args.modes.split(",")
    unknown = sorted(set(modes) - set(MODES))
    if unknown:
        parser.error(f"unknown modes {unknown}; choose from {', '.join(MODES)}")
    runs: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    for _ in range(args.repeat):
        for mode in modes:
            done = subprocess.run([sys.executable, __file__, "--one", mode, "--epochs", str(args.epochs)],
                                  capture_output=True, text=True, check=True)
            runs[mode].append(json.loads(done.stdout.strip().splitlines()[-1]))
    print(f"tiny-300, bare Trainer, {args.epochs} epochs (2 dropped), median of {args.repeat} processes; "
          "microseconds beyond the middle step")
    print(f"{'mode':16s}{'middle step':>13s}{'edge':>10s}{'after-edge':>12s}")
    for mode in modes:
        r = runs[mode]
        print(f"{mode:16s}{statistics.median(x['middle step'] for x in r):13.0f}"
              f"{statistics.median(x['edge'] for x in r):10.0f}{statistics.median(x['after-edge'] for x in r):12.0f}")


if __name__ == "__main__":
    main()
