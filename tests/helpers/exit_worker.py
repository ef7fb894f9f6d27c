"""One short 2-process run that must exit with status 0, for ``tests/distributed/test_clean_exit.py``.

Usage: ``exit_worker.py OUT CASE ENDING``.

CASE: ``ddp`` (an Accelerator DDP loop with gradient-sync checks inside and at the window boundary, as users
write them), ``stateful`` (the same loop with a stateful loader, ``save_state`` every 3 steps, and one
asynchronous-style background deletion from rotation), ``trainer`` (``Trainer(devices=2)``, started as a plain
``python`` process: it launches its two workers itself).
``inflight`` (the ``ddp`` loop, then a collective still in flight at exit: rank 1 joins it 1.5 s late, as a slow
peer would; deterministic proof that the group is not left to the interpreter's finalization).
ENDING: how the script ends: ``destroy`` (``torch.distributed.destroy_process_group()``), ``end``
(``accelerator.end_training()``), ``both`` (``end_training()`` then ``destroy_process_group()``) or ``neither``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import atexit
import os

import dist_common as common  # noqa: F401 - puts the repo on sys.path
import torch


def _threads() -> int:
    return len(os.listdir("/proc/self/task")) if os.path.isdir("/proc/self/task") else -1


_BEFORE = _threads()


def _report_threads() -> None:
    # Registered before anything of stoker or torch.distributed, so it runs after their exit handlers: what is
    # still alive now is left to the interpreter's finalization.
    print(f"exit-worker threads: {_BEFORE} before the group, {_threads()} at the last exit handler", flush=True)


atexit.register(_report_threads)
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from stoker import Accelerator, ProjectConfiguration
from stoker.accelerator import DataLoaderConfiguration

OUT, CASE, ENDING = Path(sys.argv[1]), sys.argv[2], sys.argv[3]


def data() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(48, 8, generator=g)
    return TensorDataset(x, x.sum(1, keepdim=True))


def grads_equal(acc: Accelerator, model: torch.nn.Module) -> bool:
    grad = torch.cat([p.grad.reshape(-1) for p in model.parameters()])
    gathered = acc.gather(grad).reshape(acc.num_processes, -1)
    return bool(torch.equal(gathered[0], gathered[-1]))


def loop() -> tuple:
    stateful = CASE == "stateful"
    acc = Accelerator(
        gradient_accumulation_steps=2, cpu=True,
        dataloader_config=DataLoaderConfiguration(use_stateful_dataloader=stateful),
        project_config=ProjectConfiguration(project_dir=str(OUT), automatic_checkpoint_naming=True, total_limit=2),
    )
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(data(), batch_size=4, shuffle=True)
    model, opt, loader = acc.prepare(model, opt, loader)
    for epoch in range(2):
        for x, y in loader:
            with acc.accumulate(model):
                loss = F.mse_loss(model(x), y)
                acc.backward(loss)
                if acc.sync_gradients and not grads_equal(acc, model):  # the window boundary: synced
                    raise SystemExit("gradients differ after the window's sync")
                opt.step()
                opt.zero_grad()
            if stateful and acc.step % 3 == 0 and acc.sync_gradients:
                acc.save_state()
    print(f"exit-worker {CASE} done at step {acc.step} on rank {acc.process_index}", flush=True)
    if CASE == "inflight":
        if acc.process_index == 1:
            time.sleep(1.5)
            dist.all_reduce(torch.ones(1))
        else:
            dist.all_reduce(torch.ones(1), async_op=True)  # work and tensor dropped: only gloo's thread holds them
    return acc, model, opt, loader


def trainer() -> None:
    from stoker import Trainer, TrainingModule

    class Regressor(TrainingModule):
        def __init__(self) -> None:
            super().__init__()
            self.net = torch.nn.Linear(8, 1)

        def training_step(self, batch: tuple, batch_idx: int) -> torch.Tensor:
            x, y = batch
            loss = F.mse_loss(self.net(x), y)
            self.log("loss", loss, sync_dist=True)
            return loss

        def configure_optimizers(self) -> torch.optim.Optimizer:
            return torch.optim.SGD(self.parameters(), lr=0.01)

    t = Trainer(devices=2, accelerator="cpu", max_epochs=2, default_root_dir=str(OUT), enable_progress_bar=False,
                logger=False)
    t.fit(Regressor(), DataLoader(data(), batch_size=4))
    if ENDING in ("end", "both"):
        t.accelerator.end_training()
    if ENDING in ("destroy", "both") and dist.is_initialized():
        dist.destroy_process_group()


if CASE == "trainer":
    trainer()
else:
    # Module globals, as in a training script: they live until the interpreter's finalization clears them.
    accelerator, model, optimizer, loader = loop()
    if ENDING in ("end", "both"):
        accelerator.end_training()
    if ENDING in ("destroy", "both") and dist.is_initialized():
        dist.destroy_process_group()
