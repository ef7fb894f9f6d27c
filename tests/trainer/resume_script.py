"""A training run for the resume tests: shuffled loader, dropout, a per-step scheduler, accumulation, validation.

``python -m tests.trainer.resume_script ROOT --kill-at K`` trains with a checkpoint after every optimizer step and
kills its own process (SIGKILL) in the middle of micro-batch ``K``; the test then resumes in-process with
``ckpt_path="last"`` and compares the final weights with an uninterrupted run.
"""

from __future__ import annotations

import argparse
import os
import signal
from typing import Any

import torch

from stoker import Callback, Trainer
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.weights import state_of

EPOCHS, N, BATCH, ACCUMULATE = 3, 56, 8, 2  # 7 batches per epoch: windows 2, 2, 2, 1


class SaveEveryStep(Callback):
    """Writes ``{root}/checkpoints/last`` after every optimizer step (what ModelCheckpoint(every_n_train_steps=1)
    does), so a kill at any moment leaves the previous step's checkpoint."""

    def __init__(self) -> None:
        self.seen = 0

    def on_train_batch_end(self, trainer: Trainer, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if trainer.global_step != self.seen:
            self.seen = trainer.global_step
            trainer.save_checkpoint(os.path.join(trainer.default_root_dir, "checkpoints", "last"))


class Killable(Regressor):
    def __init__(self, kill_at: int | None = None, signal_at: int | None = None) -> None:
        super().__init__(lr=0.05, scheduler="lambda", interval="step", dropout=0.2)
        self.kill_at, self.signal_at, self.micro_batches = kill_at, signal_at, 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.micro_batches += 1
        if self.micro_batches == self.kill_at:
            os.kill(os.getpid(), signal.SIGKILL)  # no cleanup, no atexit: like a node that vanished
        if self.micro_batches == self.signal_at:
            os.kill(os.getpid(), signal.SIGTERM)
        return super().training_step(batch, batch_idx)


def loaders() -> tuple[Any, Any]:
    return (make_loader(make_regression_data(n=N), batch_size=BATCH, shuffle=True),
            make_loader(make_regression_data(n=16, seed=3), batch_size=8))


def run(root: str, kill_at: int | None = None, signal_at: int | None = None, ckpt_path: str | None = None,
        save_every_step: bool = False) -> dict[str, torch.Tensor]:
    trainer = Trainer(max_epochs=EPOCHS, accumulate=ACCUMULATE, seed=1234, default_root_dir=root, logger=False,
                      enable_checkpointing=False, enable_progress_bar=False, log_every_n_steps=1,
                      callbacks=[SaveEveryStep()] if save_every_step else None)
    module = Killable(kill_at=kill_at, signal_at=signal_at)
    train, val = loaders()
    trainer.fit(module, train, val, ckpt_path=ckpt_path)
    return state_of(module)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("--kill-at", type=int, default=None)
    parser.add_argument("--signal-at", type=int, default=None)
    args = parser.parse_args()
    run(args.root, kill_at=args.kill_at, signal_at=args.signal_at, save_every_step=args.kill_at is not None)
