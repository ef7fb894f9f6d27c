"""The smallest complete use of stoker's Trainer: fit a linear regression, validate it, resume it.

    python examples/train_regression.py
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from stoker import Trainer, TrainingModule, set_seed


class Regression(TrainingModule):
    def __init__(self, features: int = 8, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.linear = torch.nn.Linear(features, 1)

    def training_step(self, batch: tuple, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.mse_loss(self.linear(x), y)
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch: tuple, batch_idx: int) -> None:
        x, y = batch
        self.log("val/loss", F.mse_loss(self.linear(x), y), prog_bar=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


def make_data(n: int, features: int = 8) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, features, generator=g)
    y = x @ torch.arange(1.0, features + 1).unsqueeze(1) + 0.1 * torch.randn(n, 1, generator=g)
    return TensorDataset(x, y)


def main(argv: list[str] | None = None) -> float:
    parser = argparse.ArgumentParser(description="Linear regression with stoker's Trainer.")
    parser.add_argument("--root", default="runs/regression")
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--samples", type=int, default=1024)
    args = parser.parse_args(argv)

    set_seed(0)  # the initial weights; Trainer(seed=0) seeds again at fit (shuffling, dropout)
    data = make_data(args.samples)
    train, val = torch.utils.data.random_split(data, [0.875, 0.125], generator=torch.Generator().manual_seed(0))
    trainer = Trainer(max_epochs=args.epochs, default_root_dir=args.root, seed=0, log_every_n_steps=10)
    trainer.fit(Regression(), DataLoader(train, batch_size=32, shuffle=True), DataLoader(val, batch_size=128),
                ckpt_path="last")  # continues where a previous (or preempted) run stopped
    loss = trainer.callback_metrics["val/loss"]
    print(f"epoch {trainer.current_epoch}, {trainer.global_step} steps: validation MSE {float(loss):.4f}")
    return float(loss)


if __name__ == "__main__":
    main()
