"""A Lightning 2.x script written with the names Lightning users import every day: ``pl.LightningModule`` and
``pl.LightningDataModule``, ``TQDMProgressBar``, ``rank_zero_only``, the ``STEP_OUTPUT``/``OptimizerLRScheduler``
annotations, ``DDPStrategy`` from ``strategies``, ``configure_optimizers`` returning ``([optimizer], [scheduler])``
and ``training_step`` returning ``{"loss": ...}``. The compat test runs it under pytorch_lightning and, with only
``pytorch_lightning`` renamed to ``stoker``, under stoker."""

import json
import os
import sys

import torch
from torch import nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset

import pytorch_lightning as pl
from pytorch_lightning.callbacks import LearningRateMonitor, TQDMProgressBar
from pytorch_lightning.loggers import CSVLogger
from pytorch_lightning.strategies import DDPStrategy
from pytorch_lightning.utilities import rank_zero_only
from pytorch_lightning.utilities.types import STEP_OUTPUT, OptimizerLRScheduler


class Data(pl.LightningDataModule):
    def setup(self, stage):
        g = torch.Generator().manual_seed(0)
        x = torch.randn(80, 5, generator=g)
        self.train_set = TensorDataset(x[:64], torch.sin(x[:64].sum(1, keepdim=True)))
        self.val_set = TensorDataset(x[64:], torch.sin(x[64:].sum(1, keepdim=True)))

    def train_dataloader(self):
        return DataLoader(self.train_set, batch_size=8)

    def val_dataloader(self):
        return DataLoader(self.val_set, batch_size=8)


class Model(pl.LightningModule):
    def __init__(self, lr: float = 0.1):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(5, 12), nn.Tanh(), nn.Linear(12, 1))

    def training_step(self, batch, batch_idx) -> STEP_OUTPUT:
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        self.log("train_loss", loss, prog_bar=True)
        return {"loss": loss}

    def validation_step(self, batch, batch_idx) -> STEP_OUTPUT:
        x, y = batch
        self.log("val_loss", F.mse_loss(self.net(x), y), prog_bar=True)

    def configure_optimizers(self) -> OptimizerLRScheduler:
        optimizer = torch.optim.SGD(self.parameters(), lr=self.hparams.lr, momentum=0.9)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)]


@rank_zero_only
def report(trainer, model, out):
    weights = {k: v.detach().clone() for k, v in model.state_dict().items()}
    torch.save(weights, out)
    return {"global_step": trainer.global_step, "epoch": trainer.current_epoch,
            "lr": trainer.optimizers[0].param_groups[0]["lr"],
            "val_loss": round(float(trainer.callback_metrics["val_loss"]), 6)}


if __name__ == "__main__":
    pl.seed_everything(0)
    strategy = DDPStrategy(find_unused_parameters=False)  # built as Lightning scripts do; this run has one process
    assert strategy is not None
    trainer = pl.Trainer(max_epochs=3, callbacks=[TQDMProgressBar(refresh_rate=4), LearningRateMonitor()],
                         logger=CSVLogger(os.path.dirname(sys.argv[1])), enable_checkpointing=False,
                         enable_model_summary=False, accelerator="cpu",
                         devices=1, num_sanity_val_steps=0)
    model = Model()
    trainer.fit(model, datamodule=Data())
    print(json.dumps(report(trainer, model, sys.argv[1])))
