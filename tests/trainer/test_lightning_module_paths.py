"""Lightning's module paths that renamed scripts import: ``stoker.core``, ``stoker.utilities.exceptions`` /
``imports`` / ``model_helpers``."""

from __future__ import annotations

import pytest

from stoker import Callback, LightningDataModule, LightningModule, ModelCheckpoint
from tests.helpers.models import Regressor


def test_core_paths_are_the_package_classes():
    from stoker.core import LightningModule as core_module
    from stoker.core.datamodule import LightningDataModule as dm
    from stoker.core.module import LightningModule as module

    assert module is core_module is LightningModule and dm is LightningDataModule


def test_misconfiguration_is_what_stoker_raises_for_bad_values():
    from stoker.utilities.exceptions import MisconfigurationException

    with pytest.raises(MisconfigurationException, match="save_top_k=3, monitor=None"):
        ModelCheckpoint(save_top_k=3)


def test_version_flags():
    from stoker.utilities.imports import _version_at_least

    assert _version_at_least("torch", (1, 0)) and not _version_at_least("torch", (999,))
    assert not _version_at_least("no-such-package-here", (0,))


def test_is_overridden():
    from stoker.utilities.model_helpers import is_overridden

    module = Regressor()
    assert is_overridden("training_step", module) and not is_overridden("on_fit_start", module)
    module.on_fit_start = lambda: None
    assert is_overridden("on_fit_start", module)
    assert not is_overridden("on_fit_start", Callback()) and not is_overridden("x", None)
    with pytest.raises(ValueError, match="expected a TrainingModule"):
        is_overridden("forward", object())


def test_trainer_trainer_path_is_the_lightning_trainer():
    import stoker
    from stoker.trainer import Trainer as CoreTrainer
    from stoker.trainer.trainer import Trainer

    assert Trainer is stoker.Trainer and Trainer is not CoreTrainer and issubclass(Trainer, CoreTrainer)
    Trainer(accumulate_grad_batches=2, logger=False)  # Lightning's arguments are taken under this path


def test_loggers_logger_path_and_dummy_logger(tmp_path):
    from stoker.loggers import Logger
    from stoker.loggers.logger import DummyLogger, Logger as PathLogger

    logger = DummyLogger(tmp_path)
    assert PathLogger is Logger and isinstance(logger, Logger)
    assert logger.experiment.add_histogram("w", [1, 2]) is None and logger.experiment[0].anything() is None
    logger.log_metrics({"loss": 1.0}, step=0)
    assert logger.version_dir == logger.log_dir == str(tmp_path) and list(tmp_path.iterdir()) == []


def test_strategies_path_names():
    from stoker.strategies import DeepSpeedStrategy, Strategy

    assert isinstance(Strategy, type)
    with pytest.raises(ValueError, match="stoker has no DeepSpeed backend"):
        DeepSpeedStrategy(stage=3)


def test_tensorboard_flag_and_combined_loader_paths():
    from importlib.util import find_spec

    from stoker.loggers.tensorboard import _TENSORBOARD_AVAILABLE
    from stoker.trainer.iterables import CombinedLoader
    from stoker.utilities import CombinedLoader as PackageCombinedLoader
    from stoker.utilities.combined_loader import CombinedLoader as PathCombinedLoader

    assert _TENSORBOARD_AVAILABLE == (find_spec("tensorboard") is not None)
    assert PathCombinedLoader is CombinedLoader
    assert PackageCombinedLoader is CombinedLoader  # Lightning's `from ...utilities import CombinedLoader`


def test_running_stage_dataloader_prefix():
    from stoker.trainer.states import RunningStage

    assert [s.dataloader_prefix for s in RunningStage] == ["train", None, "val", "test", "predict"]


def test_dummy_logger_takes_any_call_and_its_experiment_forgets_assignments(tmp_path):
    from stoker.loggers.logger import DummyExperiment, DummyLogger

    logger = DummyLogger(tmp_path)
    logger.log_hyperparams("1", 2, three="three")
    logger.log_metrics("1", 2, three="three")
    assert logger.log_text("a backend's own method") is None  # e.g. WandbLogger.log_text
    with pytest.raises(AttributeError):
        logger._not_there
    experiment = DummyExperiment()
    experiment["params"] = {"lr": 0.1}
    assert experiment["params"] is experiment and list(tmp_path.iterdir()) == []
