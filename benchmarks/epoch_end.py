"""What one epoch end costs the Trainer's training thread: the time from the last batch's end to the next epoch's
start (epoch-end hooks, epoch metrics, the per-epoch checkpoint), on the tiny MLP of ``overhead.py``.

Background work a checkpoint leaves (its commit, deleting replaced folders) is not waited for: the figure is what
the training loop is held up by. ``--sync-checkpoints`` commits every save on the training thread instead (the
behaviour before the background commit), for comparison in the same conditions. CPU time counts every thread.

Run:
    python benchmarks/epoch_end.py full --epochs 12
    python benchmarks/epoch_end.py full --epochs 12 --sync-checkpoints
    python benchmarks/epoch_end.py bare
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from overhead import WORKLOADS, full_callbacks, trainer_module  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    from stoker import Callback, Trainer

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("config", choices=["bare", "full"], help="bare: no logger/bar/checkpoints; full: all of them")
    parser.add_argument("--epochs", type=int, default=12)
    parser.add_argument("--workload", default="tiny-300", choices=sorted(WORKLOADS))
    parser.add_argument("--sync-checkpoints", action="store_true", help="commit every save on the training thread")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    w, full = WORKLOADS[args.workload], args.config == "full"

    wall: list[float] = []
    cpu: list[float] = []

    class Clock(Callback):
        last: tuple[float, float] | None = None

        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            if batch_idx == w.steps - 1:
                self.last = (time.perf_counter(), time.process_time())

        def on_train_epoch_start(self, trainer: Any, module: Any) -> None:
            if self.last is not None:
                wall.append(time.perf_counter() - self.last[0])
                cpu.append(time.process_time() - self.last[1])

    callbacks = full_callbacks(args.sync_checkpoints) if full else []
    with tempfile.TemporaryDirectory(prefix="stoker-epoch-end-") as root:
        trainer = Trainer(max_epochs=args.epochs, accelerator="cpu", default_root_dir=root, logger=full,
                          enable_checkpointing=full, enable_progress_bar=full, enable_model_summary=False,
                          callbacks=[*callbacks, Clock()])
        trainer.fit(trainer_module(w, log=full), w.make_loader())
    wall, cpu = wall[1:], cpu[1:]  # the first epoch end pays one-time imports (TensorBoard)
    print(f"{args.config}{' (sync checkpoints)' if args.sync_checkpoints else ''}, {w.name}, {len(wall)} epoch ends: "
          f"wall min {min(wall) * 1e3:.2f} median {statistics.median(wall) * 1e3:.2f} ms | "
          f"cpu min {min(cpu) * 1e3:.2f} median {statistics.median(cpu) * 1e3:.2f} ms")


if __name__ == "__main__":
    main()
