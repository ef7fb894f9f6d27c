"""CPU time, all threads, that ``ModelCheckpoint``'s default checkpoint per epoch costs a ``Trainer.fit``.

``overhead.py`` times the training thread's blocks; the checkpoint's commit (fsyncs, rename) and the deletion of the
folders it replaces run on background threads, whose CPU time is counted there only as far as it overlaps a block.
This script counts all of it: the same short fit (the tiny MLP of ``overhead.py``, two steps per epoch) with and
without checkpointing, alternating, and the difference of the process's CPU time per epoch. ``end_training`` waits
for the background work, so every save is inside the timed fit.

Run:
    python benchmarks/checkpoint_cpu.py                 # 150 epochs per fit, 3 pairs
    python benchmarks/checkpoint_cpu.py --epochs 300 --pairs 5
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from overhead import Workload, trainer_module  # noqa: E402


def fit(checkpoint: bool, epochs: int, root: str) -> tuple[float, float]:
    """(CPU ms, wall ms) per epoch of a fit with or without the default per-epoch checkpoint."""
    from stoker import Trainer

    w = Workload("checkpoint-cpu", (32, 64, 64, 1), batch_size=32, steps=2, reps=1)
    folder = tempfile.mkdtemp(dir=root)
    trainer = Trainer(max_epochs=epochs, accelerator="cpu", default_root_dir=folder, logger=False,
                      enable_checkpointing=checkpoint, enable_progress_bar=False, enable_model_summary=False)
    module, loader = trainer_module(w, log=False), w.make_loader()
    c0, t0 = time.process_time(), time.perf_counter()
    trainer.fit(module, loader)
    cpu, wall = time.process_time() - c0, time.perf_counter() - t0
    kept = sorted(os.listdir(os.path.join(folder, "checkpoints"))) if checkpoint else []
    shutil.rmtree(folder, ignore_errors=True)
    if checkpoint and kept != [f"epoch={epochs - 1}-step={2 * epochs}.ckpt"]:  # Lightning's default: no `last`
        raise RuntimeError(f"expected the last epoch's checkpoint, found {kept}: the fit did not save as this "
                           "benchmark assumes")
    return cpu / epochs * 1e3, wall / epochs * 1e3


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=150)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--dir", default=os.path.dirname(os.path.abspath(__file__)),
                        help="where to write (default: beside this script, i.e. on the repository's disk)")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    root = tempfile.mkdtemp(prefix=".checkpoint-cpu-", dir=args.dir)
    try:
        fit(True, 3, root), fit(False, 3, root)  # warm-up: imports, first-call work
        cpu, wall = [], []
        for _ in range(args.pairs):
            (c1, w1), (c0, w0) = fit(True, args.epochs, root), fit(False, args.epochs, root)
            cpu.append(c1 - c0)
            wall.append(w1 - w0)
            print(f"  with a checkpoint per epoch {c1:6.2f} ms CPU ({w1:6.2f} wall), without {c0:6.2f} ({w0:6.2f})")
        print(f"one checkpoint costs {statistics.median(cpu):.2f} ms of CPU (all threads) and "
              f"{statistics.median(wall):.2f} ms of wall time per epoch (median of {args.pairs} pairs)")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
