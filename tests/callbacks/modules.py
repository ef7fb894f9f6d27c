"""A tiny TrainingModule and loaders for callback tests in real fits.

``Regressor`` logs ``train/loss`` every step (on the progress bar) and ``val/loss`` per validation. A test can
make the validation metric follow a script (``val_scores``, one value per validation run) to drive
ModelCheckpoint / EarlyStopping deterministically, independent of how training goes.
"""

from __future__ import annotations

import torch

from stoker import Trainer, TrainingModule
from tests.helpers.models import make_loader, make_mlp, make_regression_data


class Regressor(TrainingModule):
    def __init__(self, lr: float = 0.05, val_scores: list[float] | None = None, scheduler: str | None = None,
                 groups: bool = False) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.net = make_mlp(seed=0)
        self.val_scores = list(val_scores) if val_scores is not None else None
        self.validations = 0

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = torch.nn.functional.mse_loss(self.net(x), y)
        self.log("train/loss", loss, prog_bar=True)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        self.log("val/loss", torch.nn.functional.mse_loss(self.net(x), y), prog_bar=True)

    def on_validation_epoch_end(self):
        if self.val_scores is not None:
            # The score of the validation run numbered by the trainer's epoch, so a resumed run follows the script.
            self.log("val/score", self.val_scores[self.trainer.current_epoch])
        self.validations += 1

    def configure_optimizers(self):
        hp = self.hparams
        if hp.groups:
            params = [{"params": self.net[0].parameters()}, {"params": self.net[2].parameters(), "lr": hp.lr / 10}]
        else:
            params = self.parameters()
        optimizer = torch.optim.SGD(params, lr=hp.lr)
        if hp.scheduler == "step":
            sched = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
            return {"optimizer": optimizer, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
        if hp.scheduler == "epoch":
            return optimizer, torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.1)
        return optimizer


def loaders(n: int = 32, batch_size: int = 8, shuffle: bool = True):
    """(train, val) loaders: ``n / batch_size`` batches each (4 by default)."""
    data = make_regression_data(n)
    return make_loader(data, batch_size, shuffle=shuffle), make_loader(make_regression_data(16, seed=1), batch_size)


def trainer(root, **kw) -> Trainer:
    """A quiet Trainer under ``root``: no progress bar or logger unless asked, fixed seed."""
    kw.setdefault("enable_progress_bar", False)
    kw.setdefault("logger", False)
    kw.setdefault("seed", 0)
    return Trainer(default_root_dir=str(root), **kw)


def weights(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]
