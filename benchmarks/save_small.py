"""Wall time of ``Accelerator.save_state`` for a small model: what a checkpoint per epoch costs a short epoch.

    python benchmarks/save_small.py                      # tiny MLP (2.2k parameters) + AdamW, 40 saves per mode
    python benchmarks/save_small.py --width 100000       # medium: 3.4M parameters, 41 MB of state with AdamW
    python benchmarks/save_small.py --profile            # plus a cProfile of the replace mode (main thread only)

Modes (each save is timed from the call to its return, on the calling thread):

    replace   save_state into the same folder every time (as ModelCheckpoint's ``last``): the previous checkpoint
              is swapped out and must be deleted.
    rotate    automatic naming with ``total_limit=2``: a new ``checkpoint_{n}`` each time, the oldest deleted.
    async     replace, with ``save_state(..., async_save=True)``: the call returns after the state is copied to
              memory; the writing overlaps the next "step" (a sleep of --gap ms, as training would).
    trainer   ``Trainer.fit`` with the default ``ModelCheckpoint()`` (a new top-k folder every epoch, ``last``
              hard-linked to it, the previous one evicted): the time of ModelCheckpoint's epoch-end save, taken
              by callbacks just before and after it. This is the per-epoch cost in the overhead benchmark's
              trainer-full row.
    trainer-async  the same with ``ModelCheckpoint(async_save=True)``.

Times include everything the call waits for; deletions and asynchronous writes that finish in the background are
not on the training thread and are not counted (``end_training`` waits for them at the end).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import statistics
import sys
import tempfile
import time

import torch
from torch.utils.data import DataLoader, TensorDataset

from stoker import Accelerator, DataLoaderConfiguration, ProjectConfiguration


def build(width: int, project_dir: str | None = None) -> Accelerator:
    config = ProjectConfiguration(project_dir=project_dir, automatic_checkpoint_naming=True, total_limit=2) \
        if project_dir else None
    acc = Accelerator(cpu=True, project_config=config,
                      dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=True))
    model = torch.nn.Sequential(torch.nn.Linear(32, width), torch.nn.ReLU(), torch.nn.Linear(width, 1))
    opt = torch.optim.AdamW(model.parameters())
    loader = DataLoader(TensorDataset(torch.randn(64, 32), torch.randn(64, 1)), batch_size=8)
    model, opt, loader = acc.prepare(model, opt, loader)
    for x, y in loader:
        acc.backward(torch.nn.functional.mse_loss(model(x), y))
        opt.step()
        opt.zero_grad()
    return acc


def run_trainer(width: int, saves: int, root: str, gap: float, async_save: bool = False) -> list[float]:
    from stoker import Callback, ModelCheckpoint, Trainer, TrainingModule

    class Module(TrainingModule):
        def __init__(self) -> None:
            super().__init__()
            self.model = torch.nn.Sequential(torch.nn.Linear(32, width), torch.nn.ReLU(), torch.nn.Linear(width, 1))

        def training_step(self, batch: tuple, batch_idx: int) -> torch.Tensor:
            x, y = batch
            return torch.nn.functional.mse_loss(self.model(x), y)

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.AdamW(self.parameters())

    times: list[float] = []

    class Clock(Callback):
        def __init__(self, start: bool) -> None:
            self.start = start

        @property
        def state_key(self) -> str:
            return f"Clock{self.start}"

        def on_train_epoch_end(self, trainer: Trainer, module: TrainingModule) -> None:
            if self.start:
                times.append(-time.perf_counter())
            else:
                times[-1] += time.perf_counter()
                time.sleep(gap)

    loader = DataLoader(TensorDataset(torch.randn(32, 32), torch.randn(32, 1)), batch_size=8)
    trainer = Trainer(max_epochs=saves, default_root_dir=os.path.join(root, "trainer"), logger=False,
                      enable_progress_bar=False, accelerator="cpu",
                      callbacks=[Clock(True), ModelCheckpoint(**({"async_save": True} if async_save else {})),
                                 Clock(False)])
    trainer.fit(Module(), loader)
    return times


def run(mode: str, width: int, saves: int, root: str, gap: float) -> list[float]:
    if mode.startswith("trainer"):
        return run_trainer(width, saves, root, gap, async_save=mode == "trainer-async")
    folder = os.path.join(root, mode)
    acc = build(width, folder if mode == "rotate" else None)
    times = []
    for _ in range(saves):
        t0 = time.perf_counter()
        if mode == "rotate":
            acc.save_state()
        elif mode == "async":
            acc.save_state(os.path.join(folder, "last"), async_save=True)
        else:
            acc.save_state(os.path.join(folder, "last"))
        times.append(time.perf_counter() - t0)
        if gap:
            time.sleep(gap)
    acc.end_training()
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--width", type=int, default=64, help="hidden width of the MLP (64: ~2k parameters)")
    parser.add_argument("--saves", type=int, default=40)
    parser.add_argument("--modes", default="replace,rotate,async,trainer,trainer-async")
    parser.add_argument("--gap", type=float, default=20.0, help="ms of 'training' between saves")
    parser.add_argument("--dir", default=os.path.dirname(os.path.abspath(__file__)),
                        help="where to write (default: beside this script, i.e. on the repository's disk)")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix=".save-small-", dir=args.dir)
    try:
        params = 32 * args.width + args.width + args.width + 1
        print(f"torch {torch.__version__}, width {args.width} ({params:,} parameters, {params * 12 / 1e6:.2f} MB with "
              f"AdamW), {args.saves} saves per mode, gap {args.gap} ms, in {args.dir}")
        for mode in args.modes.split(","):
            try:
                times = sorted(run(mode, args.width, args.saves, root, args.gap / 1e3))
            except TypeError as e:  # a stoker without async_save
                print(f"  {mode:<14} not available ({e})")
                continue
            ms = [t * 1e3 for t in times]
            print(f"  {mode:<14} median {statistics.median(ms):7.2f} ms   p10 {ms[len(ms) // 10]:7.2f}   "
                  f"p90 {ms[len(ms) * 9 // 10]:7.2f}   min {ms[0]:7.2f}")
        if args.profile:
            acc = build(args.width)
            target = os.path.join(root, "profiled")
            acc.save_state(target)
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(10):
                acc.save_state(target)
            profile.disable()
            acc.end_training()
            pstats.Stats(profile, stream=sys.stdout).sort_stats("tottime").print_stats(12)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
