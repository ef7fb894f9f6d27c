"""Every run's folder holds ``hparams.yaml``, as Lightning's: ``{}`` when the module saved no hyperparameters,
written once by ``Logger.save()`` when ``fit`` starts (after the hyperparameters and the graph)."""

from __future__ import annotations

import os

import pytest
import torch
import torch.nn.functional as F
import yaml

from stoker import CSVLogger, TensorBoardLogger, Trainer, TrainingModule
from tests.helpers.models import Regressor, make_loader, make_mlp, make_regression_data


class NoHparams(TrainingModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = make_mlp()

    def training_step(self, batch, batch_idx):
        x, y = batch
        return F.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.01)


def _fit(tmp_path, logger, module) -> None:
    trainer = Trainer(default_root_dir=str(tmp_path), logger=logger, max_steps=1, enable_progress_bar=False,
                      enable_model_summary=False, enable_checkpointing=False, log_every_n_steps=1)
    trainer.fit(module, make_loader(make_regression_data(16)))


@pytest.mark.parametrize("make", [TensorBoardLogger, CSVLogger])
def test_a_module_without_hyperparameters_gets_an_empty_hparams_yaml(tmp_path, make):
    logger = make(str(tmp_path))
    _fit(tmp_path, logger, NoHparams())
    with open(os.path.join(logger.log_dir, "hparams.yaml")) as file:
        assert yaml.safe_load(file) == {}
    assert not os.path.exists(tmp_path / "hparams.yaml")  # in the run's version folder, not above it


@pytest.mark.parametrize("make", [TensorBoardLogger, CSVLogger])
def test_save_keeps_the_hyperparameters_already_written(tmp_path, make):
    logger = make(str(tmp_path))
    _fit(tmp_path, logger, Regressor(lr=0.125))
    path = os.path.join(logger.log_dir, "hparams.yaml")
    with open(path) as file:
        assert yaml.safe_load(file)["lr"] == 0.125
    with open(path, "w") as file:
        file.write("lr: 9\n")
    logger.save()  # the run's file is there: written once, not again
    with open(path) as file:
        assert file.read() == "lr: 9\n"
