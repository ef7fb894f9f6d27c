"""A plain Lightning 2.x script (a DataModule, Lightning's Trainer names, ModelCheckpoint, ckpt_path="best"); the
compat test runs it as is under pytorch_lightning and, with its imports renamed, under stoker."""

import json
import os
import sys

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint


class Data(pl.LightningDataModule):
    def __init__(self, batch_size=8):
        super().__init__()
        self.save_hyperparameters()

    def setup(self, stage):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(96, 6, generator=g)
        self.train_set = TensorDataset(x[:64], x[:64].sum(1, keepdim=True))
        self.val_set = TensorDataset(x[64:], x[64:].sum(1, keepdim=True))

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=self.hparams.batch_size)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=self.hparams.batch_size)

    test_dataloader = val_dataloader


class Model(pl.LightningModule):
    def __init__(self, lr=0.05):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(6, 16), nn.Tanh(), nn.Linear(16, 1))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.mse_loss(self(x), y)

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val_loss", F.mse_loss(self(x), y))

    def test_step(self, batch, batch_idx):
        x, y = batch
        self.log("test_loss", F.mse_loss(self(x), y))

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class CountValidation(pl.Callback):
    def __init__(self):
        self.runs, self.sanity = 0, 0

    def on_validation_end(self, trainer, pl_module):
        if trainer.sanity_checking:
            self.sanity += 1
        else:
            self.runs += 1


if __name__ == "__main__":
    out = sys.argv[1]
    pl.seed_everything(0)
    count = CountValidation()
    ckpt = ModelCheckpoint(dirpath=os.path.join(out, "ckpts"), monitor="val_loss", save_top_k=2, save_last=True)
    trainer = pl.Trainer(max_epochs=3, accumulate_grad_batches=2, gradient_clip_val=1.0, precision="32-true",
                         num_sanity_val_steps=2, callbacks=[count, ckpt], logger=False, enable_progress_bar=False,
                         enable_model_summary=False, accelerator="cpu", devices=1, default_root_dir=out)
    dm = Data()
    trainer.fit(Model(), datamodule=dm)
    test = trainer.test(datamodule=dm, ckpt_path="best")[0]["test_loss"]
    files = sorted(name.removesuffix(".ckpt") for name in os.listdir(os.path.join(out, "ckpts")))
    print(json.dumps({"global_step": trainer.global_step, "val_runs": count.runs, "sanity": count.sanity,
                      "checkpoints": files, "best": os.path.basename(ckpt.best_model_path).removesuffix(".ckpt"),
                      "best_score": round(float(ckpt.best_model_score), 5), "test_loss": round(test, 5)}))
