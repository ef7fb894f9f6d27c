"""A long ``Trainer(devices=2)`` run started as a plain ``python`` process, for ``tests/distributed/test_signals.py``.

Usage: ``signal_worker.py OUT``. Each worker writes ``pid{rank}`` (its process id) once it trains; rank 0 writes
``ready`` after optimizer step 2. The run would take minutes: the test stops it with a signal to the launcher.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import dist_common as common  # noqa: F401 - puts the repo on sys.path
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from stoker import Callback, Trainer, TrainingModule

OUT = Path(sys.argv[1])


class Slow(TrainingModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.nn.Linear(4, 1)

    def training_step(self, batch: tuple, batch_idx: int) -> torch.Tensor:
        time.sleep(0.05)
        x, y = batch
        return F.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)


class Report(Callback):
    def on_train_start(self, trainer: Trainer, module: TrainingModule) -> None:
        import os

        (OUT / f"pid{trainer.accelerator.process_index}").write_text(str(os.getpid()))

    def on_train_batch_end(self, trainer: Trainer, module: TrainingModule, *args: object) -> None:
        if trainer.global_step == 2 and trainer.is_global_zero:
            (OUT / "ready").write_text("2")


if __name__ == "__main__":
    x = torch.randn(64, 4)
    trainer = Trainer(devices=2, accelerator="cpu", max_epochs=1000, default_root_dir=str(OUT), logger=False,
                      enable_progress_bar=False, callbacks=[Report()])
    trainer.fit(Slow(), DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=8))
