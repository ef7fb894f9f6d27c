"""The Accelerator's log_with / init_trackers / log / end_training write through stoker's loggers, read back."""

import csv
import os

import torch

from stoker import Accelerator, CSVLogger, ProjectConfiguration, TensorBoardLogger
from tests.helpers.trackers_readback import tensorboard_scalars


def test_log_with_tensorboard_and_csv_in_a_training_loop(tmp_path):
    accelerator = Accelerator(log_with=["tensorboard", "csv"], project_config=ProjectConfiguration(project_dir=tmp_path))
    model = torch.nn.Linear(2, 1)
    model, optimizer = accelerator.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    accelerator.init_trackers("exp", config={"lr": 0.1, "opt": {"name": "sgd"}})
    tb, csv_logger = accelerator.trackers
    assert isinstance(tb, TensorBoardLogger) and isinstance(csv_logger, CSVLogger)
    assert accelerator.get_tracker("csv") is csv_logger
    losses = []
    for step in range(3):
        loss = model(torch.ones(4, 2)).pow(2).mean()
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
        accelerator.log({"train/loss": loss}, step=step)
    accelerator.end_training()

    assert tb.log_dir == csv_logger.log_dir == os.path.join(str(tmp_path), "exp", "version_0")
    scalars = tensorboard_scalars(tb.log_dir)
    assert [s for s, _ in scalars["train/loss"]] == [0, 1, 2]
    assert [v for _, v in scalars["train/loss"]] == [torch.tensor(x).float().item() for x in losses]
    with open(csv_logger.metrics_file_path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert [int(r["step"]) for r in rows] == [0, 1, 2]
    assert [float(r["train/loss"]) for r in rows] == losses
    assert 'lr: 0.1' in (tmp_path / "exp" / "version_0" / "hparams.yaml").read_text()


def test_a_tracker_from_get_tracker_logs_with_accelerates_call(tmp_path):
    accelerator = Accelerator(cpu=True, log_with="tensorboard", project_dir=str(tmp_path))
    accelerator.init_trackers("exp")
    accelerator.get_tracker("tensorboard").log({"val/acc": 0.5}, step=4)  # an Accelerate script's own call
    accelerator.end_training()
    assert tensorboard_scalars(accelerator.get_tracker("tensorboard").log_dir)["val/acc"] == [(4, 0.5)]
