"""A Lightning-style script on stoker: a DataModule, Lightning's Trainer names, the model summary, the best
checkpoint (ckpt_path="best") and load_from_checkpoint. Coming from Lightning, the port is the import renaming:
``pytorch_lightning`` -> ``stoker``, ``LightningModule`` -> ``TrainingModule``, ``LightningDataModule`` ->
``DataModule`` (README, "Coming from Lightning").

    python examples/lightning_style.py [--root DIR] [--epochs N]
"""

from __future__ import annotations

import argparse
import json

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset, random_split

import stoker as pl
from stoker.callbacks import EarlyStopping, ModelCheckpoint


class Blobs(pl.DataModule):
    """Three Gaussian blobs in 2-D: a small classification data set made in ``setup``."""

    def __init__(self, n: int = 600, batch_size: int = 32) -> None:
        super().__init__()
        self.save_hyperparameters()

    def prepare_data(self) -> None:
        pass  # downloads go here: run once per node, before setup

    def setup(self, stage: str) -> None:
        g = torch.Generator().manual_seed(0)
        labels = torch.randint(0, 3, (self.hparams.n,), generator=g)
        centres = torch.tensor([[0.0, 2.0], [2.0, -1.0], [-2.0, -1.0]])
        points = centres[labels] + 0.8 * torch.randn(self.hparams.n, 2, generator=g)
        full = TensorDataset(points, labels)
        self.train_set, self.val_set, self.test_set = random_split(full, [0.7, 0.15, 0.15], generator=g)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_set, batch_size=self.hparams.batch_size)

    def test_dataloader(self) -> DataLoader:
        return DataLoader(self.test_set, batch_size=self.hparams.batch_size)


class Classifier(pl.TrainingModule):
    def __init__(self, hidden: int = 32, lr: float = 0.05) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(2, hidden), nn.ReLU(), nn.Linear(hidden, 3))
        self.example_input_array = torch.zeros(4, 2)  # the summary shows in/out sizes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch: tuple, batch_idx: int) -> torch.Tensor:
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return loss

    def _evaluate(self, batch: tuple, stage: str) -> None:
        x, y = batch
        logits = self(x)
        self.log(f"{stage}_loss", F.cross_entropy(logits, y), prog_bar=True)
        self.log(f"{stage}_acc", (logits.argmax(1) == y).float().mean(), prog_bar=True)

    def validation_step(self, batch: tuple, batch_idx: int) -> None:
        self._evaluate(batch, "val")

    def test_step(self, batch: tuple, batch_idx: int) -> None:
        self._evaluate(batch, "test")

    def configure_optimizers(self) -> dict:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        scheduler = torch.optim.lr_scheduler.ReduceLROnPlateau(optimizer, factor=0.5, patience=1)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "monitor": "val_loss"}}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="lightning_style_run", help="default_root_dir: checkpoints and logs")
    parser.add_argument("--epochs", type=int, default=6)
    args = parser.parse_args(argv)

    pl.seed_everything(0)
    data = Blobs()
    checkpoint = ModelCheckpoint(monitor="val_loss", mode="min", save_top_k=2, filename="{epoch}-{val_loss:.3f}")
    trainer = pl.Trainer(
        max_epochs=args.epochs, accumulate_grad_batches=2, gradient_clip_val=1.0, precision="32-true",
        callbacks=[checkpoint, EarlyStopping(monitor="val_loss", patience=3)], logger="csv",
        default_root_dir=args.root, enable_progress_bar=False,  # the model summary prints at fit start
    )
    trainer.fit(Classifier(), datamodule=data)
    print(f"best checkpoint: {checkpoint.best_model_path} (val_loss {checkpoint.best_model_score:.4f})")

    tested = trainer.test(datamodule=data, ckpt_path="best")[0]  # the best weights, not the last ones
    best = Classifier.load_from_checkpoint(checkpoint.best_model_path)  # rebuilt from its hyperparameters
    reloaded = pl.Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False,
                          enable_model_summary=False).test(best, datamodule=data)[0]
    result = {"global_step": trainer.global_step, "best_model_score": checkpoint.best_model_score,
              "test_acc": tested["test_acc"], "reloaded_test_acc": reloaded["test_acc"],
              "hidden": best.hparams.hidden}
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
