"""A script in the shape Lightning's CLI docs give (``main.py``), imports renamed to stoker: a module, a data module
and ``LightningCLI(Regressor, RandomData)``. The tests import its classes and run it as ``python cli_script.py fit``."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

import stoker
from stoker.cli import LightningCLI, OptimizerCallable


class Regressor(stoker.LightningModule):
    """A linear model; ``lr`` and ``width`` come from ``--model.*``."""

    def __init__(self, width: int = 4, lr: float = 0.1) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.layer = torch.nn.Linear(width, 1)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.layer(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", torch.nn.functional.mse_loss(self.layer(x), y))

    def predict_step(self, batch, batch_idx):
        return self.layer(batch[0])

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class WideRegressor(Regressor):
    """A subclass chosen by class path (``--model=cli_script.WideRegressor``)."""

    def __init__(self, depth: int = 2, **kwargs) -> None:
        super().__init__(**kwargs)
        self.depth = depth


class Injected(Regressor):
    """Arguments that are objects (dependency injection): a module and an optimizer still to get its parameters."""

    def __init__(self, activation: torch.nn.Module = None, optimizer: OptimizerCallable = torch.optim.SGD,
                 width: int = 4) -> None:
        super().__init__(width=width)
        self.save_hyperparameters()
        self.activation = activation or torch.nn.Identity()
        self.optimizer = optimizer

    def configure_optimizers(self):
        return self.optimizer(self.parameters())


class RandomData(stoker.LightningDataModule):
    """``size`` random samples of ``width`` features; ``batch_size`` from ``--data.batch_size``."""

    def __init__(self, width: int = 4, size: int = 16, batch_size: int = 4) -> None:
        super().__init__()
        self.batch_size = batch_size
        generator = torch.Generator().manual_seed(0)
        x = torch.randn(size, width, generator=generator)
        self.dataset = TensorDataset(x, x.sum(dim=1, keepdim=True))

    def train_dataloader(self):
        return DataLoader(self.dataset, batch_size=self.batch_size)

    def val_dataloader(self):
        return DataLoader(self.dataset, batch_size=self.batch_size)

    def test_dataloader(self):
        return DataLoader(self.dataset, batch_size=self.batch_size)

    def predict_dataloader(self):
        return DataLoader(self.dataset, batch_size=self.batch_size)


def main() -> LightningCLI:
    return LightningCLI(Regressor, RandomData)


if __name__ == "__main__":
    main()
