"""``hparams.yaml`` is written in block YAML, as Lightning writes it (it used to be JSON text), and reads back with
``yaml.safe_load`` and ``load_from_checkpoint(hparams_file=...)``."""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import pytest
import torch
import yaml

from stoker import CSVLogger, TensorBoardLogger
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.trainers import quiet_trainer

PARAMS = {"lr": torch.tensor(0.5), "model": {"layers": (2, 3), "act": "tanh"}, "path": Path("/data"),
          "eps": 1e-8, "big": float("inf"), "flag": True, "none": None}
EXPECTED = {"lr": 0.5, "model": {"layers": [2, 3], "act": "tanh"}, "path": "/data", "eps": 1e-8,
            "big": float("inf"), "flag": True, "none": None, "seed": 7}


@pytest.mark.parametrize("cls", [CSVLogger, TensorBoardLogger])
def test_hparams_yaml_is_block_yaml(tmp_path: Path, cls: type) -> None:
    logger = cls(tmp_path)
    logger.log_hyperparams(PARAMS)
    logger.log_hyperparams(argparse.Namespace(seed=7))
    logger.finalize("success")
    text = (Path(logger.log_dir) / "hparams.yaml").read_text()
    assert yaml.safe_load(text) == EXPECTED
    assert "lr: 0.5\n" in text and "model:\n  layers:\n  - 2\n  - 3\n" in text and "seed: 7\n" in text
    with pytest.raises(json.JSONDecodeError):  # YAML's block style, not JSON's braces
        json.loads(text)


def test_load_from_checkpoint_reads_the_loggers_hparams_yaml(tmp_path: Path) -> None:
    logger = CSVLogger(tmp_path)
    trainer = quiet_trainer(max_steps=2, logger=logger, enable_checkpointing=True, default_root_dir=str(tmp_path))
    trainer.fit(Regressor(lr=0.125, momentum=0.25, seed=3), make_loader(make_regression_data(n=16)))
    hparams_file = os.path.join(logger.log_dir, "hparams.yaml")
    with open(hparams_file) as f:
        assert yaml.safe_load(f)["lr"] == 0.125
    loaded = Regressor.load_from_checkpoint(trainer.checkpoint_callback.best_model_path, hparams_file=hparams_file)
    assert (loaded.hparams.lr, loaded.hparams.momentum, loaded.hparams.seed) == (0.125, 0.25, 3)
