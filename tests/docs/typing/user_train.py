"""A user's training script, written against stoker's public API only."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

import stoker
from stoker.callbacks import Callback, ModelCheckpoint


class Regression(stoker.TrainingModule):
    def __init__(self, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.linear = torch.nn.Linear(4, 1)

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self.linear(x), y)
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.05)


class Counter(Callback):
    def __init__(self) -> None:
        self.batches = 0

    def on_train_batch_end(self, trainer: stoker.Trainer, module: stoker.TrainingModule, outputs: object,
                           batch: object, batch_idx: int) -> None:
        self.batches += 1


def fit(root: str) -> int:
    x = torch.randn(64, 4)
    loader = DataLoader(TensorDataset(x, x.sum(dim=1, keepdim=True)), batch_size=8)
    trainer = stoker.Trainer(max_epochs=1, accumulate=2, precision="fp16", default_root_dir=root,
                             callbacks=[Counter(), ModelCheckpoint(monitor="train/loss")])
    trainer.fit(Regression(), loader)
    step: int = trainer.global_step
    return step


def loop() -> float:
    accelerator = stoker.Accelerator(gradient_accumulation_steps=2)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    total = 0.0
    for inputs, targets in loader:
        with accelerator.accumulate(model):
            loss = F.mse_loss(model(inputs), targets)
            accelerator.backward(loss)
            optimizer.step()
            optimizer.zero_grad()
            total += float(loss.detach())
    return total
