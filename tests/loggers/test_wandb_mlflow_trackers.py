"""W&B and MLflow as Accelerator trackers (``log_with="all"``, ``get_tracker``) and as Trainer loggers, read back with
each tool's own reader; missing packages fail at construction; ``import stoker`` does not import either package."""

from __future__ import annotations

import csv
import enum
import os
import sys
from pathlib import Path

import pytest
import torch

from stoker import Accelerator, ProjectConfiguration
from stoker.compat.accelerate.trackers import NullTracker, find_tracker
from stoker.loggers import (
    CSVLogger, MLFlowLogger, TensorBoardLogger, WandbLogger, available_loggers, build_loggers, resolve_logger_spec,
)
from tests.helpers.forkserver import run_python
from tests.helpers.trackers_readback import mlflow_history, mlflow_runs, tensorboard_scalars, wandb_runs

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def offline_env(tmp_path, monkeypatch: pytest.MonkeyPatch) -> str:
    """W&B offline, MLflow in a file store under tmp_path; returns the MLflow tracking URI."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    uri = (tmp_path / "mlruns").as_uri()
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    return uri


@pytest.mark.slow  # one W&B run (the W&B service starts) and the MLflow import: several seconds
def test_log_with_all_writes_every_tracker_under_one_version(offline_env, tmp_path):
    (tmp_path / "out" / "exp" / "version_0").mkdir(parents=True)  # an earlier run: this one is version_1
    accelerator = Accelerator(log_with="all", project_config=ProjectConfiguration(project_dir=tmp_path / "out"))
    accelerator.init_trackers("exp", config={"lr": 0.1}, init_kwargs={"wandb": {"name": "run-a", "tags": ["t"]},
                                                                      "mlflow": {"tags": {"team": "x"}}})
    assert [type(t) for t in accelerator.trackers] == [TensorBoardLogger, CSVLogger, WandbLogger, MLFlowLogger]
    wandb_run = accelerator.get_tracker("wandb", unwrap=True)
    assert wandb_run is accelerator.trackers[2].experiment and wandb_run.name == "run-a"
    client = accelerator.get_tracker("mlflow", unwrap=True)
    assert type(client).__name__ == "MlflowClient"
    assert accelerator.get_tracker("csv", unwrap=True) is accelerator.trackers[1]  # no underlying object
    for step, loss in enumerate([0.5, 0.25]):
        accelerator.log({"train/loss": torch.tensor(loss)}, step=step)
    accelerator.end_training()

    version_dir = tmp_path / "out" / "exp" / "version_1"
    assert tensorboard_scalars(str(version_dir)) == {"train/loss": [(0, 0.5), (1, 0.25)]}
    with open(version_dir / "metrics.csv", newline="") as f:
        assert [(r["step"], r["train/loss"]) for r in csv.DictReader(f)] == [("0", "0.5"), ("1", "0.25")]
    (run,) = wandb_runs(version_dir)
    assert run.display_name == "run-a" and run.project == "exp" and run.exit_code == 0
    assert run.config == {"lr": 0.1} and run.history == [(0, {"train/loss": 0.5}), (1, {"train/loss": 0.25})]
    (ml_run,) = mlflow_runs(offline_env, "exp")
    assert ml_run.info.run_name == "version_1" and ml_run.info.status == "FINISHED"
    assert ml_run.data.params == {"lr": "0.1"} and ml_run.data.tags["team"] == "x"
    assert mlflow_history(offline_env, ml_run.info.run_id, "train/loss") == [(0, 0.5), (1, 0.25)]


@pytest.mark.slow  # one W&B run and one MLflow run through Trainer.fit
def test_trainer_logs_to_wandb_and_mlflow_loggers(offline_env, tmp_path):
    from stoker import Trainer
    from tests.helpers.models import Regressor, make_loader, make_regression_data

    wandb_logger = WandbLogger(project="fit", save_dir=tmp_path)
    mlflow_logger = MLFlowLogger(experiment_name="fit")
    trainer = Trainer(max_steps=3, logger=[wandb_logger, mlflow_logger], log_every_n_steps=1,
                      enable_checkpointing=False, enable_progress_bar=False, default_root_dir=tmp_path)
    trainer.fit(Regressor(lr=0.01), make_loader(make_regression_data(n=48), batch_size=16))

    (run,) = wandb_runs(tmp_path / "fit")
    assert run.exit_code == 0 and run.config["lr"] == 0.01
    assert [step for step, values in run.history if "train/loss" in values] == [1, 2, 3]
    (ml_run,) = mlflow_runs(offline_env, "fit")
    assert ml_run.data.params["lr"] == "0.01" and ml_run.info.status == "FINISHED"
    wandb_losses = [values["train/loss"] for _, values in run.history if "train/loss" in values]
    mlflow_losses = [v for _, v in mlflow_history(offline_env, ml_run.info.run_id, "train/loss")]
    assert mlflow_losses == pytest.approx(wandb_losses, rel=1e-6) and len(mlflow_losses) == 3


def test_all_means_every_installed_logger_and_accepts_enums(monkeypatch):
    assert resolve_logger_spec("all") == ["tensorboard", "csv", "wandb", "mlflow"]
    assert resolve_logger_spec(["csv", "ALL"]) == ["csv", "tensorboard", "wandb", "mlflow"]  # no duplicates

    class LoggerType(enum.Enum):  # the shape of Accelerate's LoggerType
        WANDB = "wandb"
        ALL = "all"

    assert resolve_logger_spec([LoggerType.WANDB]) == ["wandb"]
    monkeypatch.setitem(sys.modules, "wandb", None)
    assert "wandb" not in available_loggers()
    assert resolve_logger_spec(LoggerType.ALL) == ["tensorboard", "csv", "mlflow"]


@pytest.mark.parametrize("package", ["wandb", "mlflow"])
def test_a_named_tracker_that_is_not_installed_fails_at_construction(monkeypatch, tmp_path, package):
    monkeypatch.setitem(sys.modules, package, None)  # what an environment without it looks like to imports
    message = rf"log_with='{package}' needs the '{package}' package.*pip install 'stoker\[{package}\]'"
    with pytest.raises(ModuleNotFoundError, match=message):
        Accelerator(log_with=package)
    with pytest.raises(ModuleNotFoundError, match=message):
        Accelerator(log_with=["csv", package])
    with pytest.raises(ModuleNotFoundError, match=rf"logger='{package}' needs"):
        build_loggers(package, tmp_path, argument="logger")
    with pytest.raises(ValueError, match="'wandbb' is not a supported logger.*'wandb', 'mlflow', 'comet_ml', 'all'"):
        Accelerator(log_with="wandbb")


def test_get_tracker_by_name_before_init_and_on_other_processes(tmp_path):
    accelerator = Accelerator(log_with=["csv"], project_dir=tmp_path)
    with pytest.raises(RuntimeError, match="before init_trackers"):
        accelerator.get_tracker("csv")
    accelerator.init_trackers("exp")
    (csv_logger,) = accelerator.trackers
    assert accelerator.get_tracker("CSV") is csv_logger
    with pytest.raises(ValueError, match=r"no such tracker. This Accelerator's trackers are \['csv'\]"):
        accelerator.get_tracker("wandb")
    # Other ranks hold no trackers: Accelerate's scripts still call them there, and nothing happens.
    null = find_tracker([], "wandb", unwrap=True, is_main_process=False, initialized=True)
    assert isinstance(null, NullTracker) and null.log({"a": 1}, step=0) is None and null.experiment is null
    accelerator.end_training()


def test_import_and_construction_do_not_import_wandb_or_mlflow(tmp_path):
    code = (
        "import sys, stoker\n"
        "from stoker import Accelerator, WandbLogger, MLFlowLogger\n"
        "from stoker.loggers import WandbLogger as W2\n"
        "assert W2 is WandbLogger\n"
        f"acc = Accelerator(log_with=['wandb', 'mlflow'], project_dir={str(tmp_path)!r})\n"
        "acc.init_trackers('exp')\n"
        f"WandbLogger(save_dir={str(tmp_path)!r}); MLFlowLogger(save_dir={str(tmp_path)!r})\n"
        "bad = sorted({m.split('.')[0] for m in sys.modules} & {'wandb', 'mlflow'})\n"
        "assert not bad, bad\n"
        "assert not any(p.name != 'exp' for p in __import__('pathlib').Path(" + repr(str(tmp_path)) + ").iterdir())\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    env.pop("MLFLOW_TRACKING_URI", None)
    result = run_python(["-c", code], env=env, timeout=120)  # a process without stoker, wandb or mlflow loaded
    assert result.returncode == 0, result.stderr


def test_trainer_takes_the_same_names(offline_env, tmp_path):
    from stoker import Trainer

    trainer = Trainer(logger=["csv", "wandb", "mlflow"], default_root_dir=tmp_path, enable_progress_bar=False)
    csv_logger, wandb_logger, mlflow_logger = trainer.loggers
    assert (type(wandb_logger), type(mlflow_logger)) == (WandbLogger, MLFlowLogger)
    assert wandb_logger.project == mlflow_logger.name == "stoker_logs" and wandb_logger.save_dir == str(tmp_path)
    assert mlflow_logger.tracking_uri == offline_env
