"""Lightning behaviours a renamed script relies on: ``fast_dev_run``'s logger, ``trainer.strategy``,
``enable_validation``, ``progress_bar_metrics`` as numbers, the bar's totals, ``self.log(on_step=True)`` in
validation, ``self.log`` from a callback, ``trainer.state.finished`` and the 1 / 1.0 info lines."""

from __future__ import annotations

import logging
import os
from typing import Any

import pytest
import torch

from stoker import Callback, ProgressBar
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.trackers_readback import ListLogger
from tests.helpers.trainers import quiet_trainer


def loader(n: int = 32) -> Any:
    return make_loader(make_regression_data(n=n), batch_size=8)


class UsesExperiment(Regressor):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.logger.experiment.add_histogram("w", self.net[0].weight)  # a backend call in user code
        return super().training_step(batch, batch_idx)


def test_fast_dev_run_logger_is_a_dummy_that_writes_nothing(tmp_path):
    from stoker.loggers.logger import DummyLogger

    trainer = quiet_trainer(fast_dev_run=2, logger=True, default_root_dir=tmp_path)
    trainer.fit(UsesExperiment(), loader(), loader())
    assert isinstance(trainer.logger, DummyLogger) and trainer.loggers == []
    assert list(tmp_path.iterdir()) == []
    assert quiet_trainer(fast_dev_run=True).logger is None  # logger=False stays no logger


def test_fast_dev_run_records_every_steps_values():
    # Lightning's rule: a debugging run records each step's values (to its DummyLogger), whatever
    # log_every_n_steps is, so trainer.logged_metrics shows what training_step logged.
    seen = []

    class Reads(Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            seen.append("train/loss" in trainer.logged_metrics)

    trainer = quiet_trainer(fast_dev_run=2, logger=True, callbacks=[Reads()], log_every_n_steps=50)
    trainer.fit(Regressor(), loader(), loader())
    assert seen == [False, True]  # recorded after the batch-end hooks, as in Lightning
    assert "train/loss" in trainer.logged_metrics
    trainer = quiet_trainer(max_steps=2, logger=False, callbacks=[Reads()], log_every_n_steps=50)
    seen.clear()
    trainer.fit(Regressor(), loader(), loader())
    assert seen == [False, False] and "train/loss" not in trainer.logged_metrics  # no loggers: not read


def test_strategy_answers_lightnings_public_names():
    trainer = quiet_trainer(max_steps=1)
    strategy = trainer.strategy
    assert strategy.root_device == torch.device("cpu") and strategy.world_size == 1
    assert (strategy.global_rank, strategy.local_rank, strategy.is_global_zero) == (0, 0, True)
    assert strategy.broadcast({"a": 1}) == {"a": 1} and strategy.barrier("x") is None
    assert torch.equal(strategy.reduce(torch.tensor(3.0)), torch.tensor(3.0))
    with pytest.raises(ValueError, match="reduce_op='max'"):
        strategy.reduce(torch.tensor(1.0), reduce_op="max")
    module = Regressor()
    trainer.fit(module, loader())
    assert trainer.strategy.lightning_module is module and trainer.strategy.model is module


def test_enable_validation():
    module = Regressor()
    trainer = quiet_trainer(max_steps=1)
    trainer.fit(module, loader(), loader())
    assert trainer.enable_validation
    trainer = quiet_trainer(max_steps=1, limit_val_batches=0)
    trainer.fit(module, loader(), loader())
    assert not trainer.enable_validation
    module.validation_step = None
    trainer = quiet_trainer(max_steps=1)
    trainer.fit(module, loader())
    assert not trainer.enable_validation


def test_progress_bar_metrics_are_numbers():
    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(Regressor(prog_bar=True), loader(), loader())
    metrics = trainer.progress_bar_metrics
    assert set(metrics) == {"train/loss", "val/loss"} and all(type(v) is float for v in metrics.values())
    assert metrics["val/loss"] == trainer.callback_metrics["val/loss"].item()
    assert all(isinstance(v, torch.Tensor) for v in trainer.progress_bar_values.values())  # as logged


class ReadsTotals(Callback):
    def __init__(self) -> None:
        self.val_totals: list[Any] = []
        self.train_totals: list[Any] = []

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        bar = trainer.progress_bar_callback
        self.val_totals.append(bar.total_val_batches)
        self.train_totals.append(bar.total_train_batches)
        self.shown = bar.get_metrics(trainer, module)


def test_progress_bar_totals_and_metrics(capsys):
    reader = ReadsTotals()
    trainer = quiet_trainer(max_epochs=4, check_val_every_n_epoch=2, limit_val_batches=3, enable_progress_bar=True,
                            callbacks=[ProgressBar(), reader])
    trainer.fit(Regressor(prog_bar=True), loader(), loader())
    assert reader.val_totals == [0, 3, 0, 3] and reader.train_totals == [4] * 4
    assert set(reader.shown) == {"train/loss", "val/loss"} and type(reader.shown["train/loss"]) is float
    with pytest.raises(RuntimeError, match="once a Trainer run has set the bar up"):
        ProgressBar().total_train_batches


class LogsPerValidationStep(Regressor):
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("n", float(batch_idx), on_step=True, on_epoch=True)


def test_log_on_step_in_validation_gives_a_point_per_batch():
    logger = ListLogger()
    trainer = quiet_trainer(max_epochs=2, logger=logger, log_every_n_steps=100)
    trainer.fit(LogsPerValidationStep(), loader(), loader(n=24))
    assert {"n_step", "n_epoch"} <= set(trainer.logged_metrics)
    steps = [(step, row["n_step"]) for step, row in logger.rows if "n_step" in row]
    assert steps == [(0, 0.0), (1, 1.0), (2, 2.0), (3, 0.0), (4, 1.0), (5, 2.0)]  # its own axis, across validations
    assert [row["n_epoch"] for _, row in logger.rows if "n_epoch" in row] == [1.0, 1.0]


class LogsFromCallback(Callback):
    def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.log("from_callback", 3.0)

    def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
        self.log_dict({"epoch_value": 5.0})


def test_callback_logs_through_the_module():
    callback = LogsFromCallback()
    trainer = quiet_trainer(max_epochs=1, callbacks=[callback])
    trainer.fit(Regressor(), loader())
    assert trainer.callback_metrics["from_callback"] == 3.0 and trainer.callback_metrics["epoch_value"] == 5.0
    with pytest.raises(RuntimeError, match="outside a Trainer run"):
        LogsFromCallback().log("x", 1.0)


class Fails(Regressor):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        raise RuntimeError("boom")


def test_state_status():
    trainer = quiet_trainer(max_steps=1)
    assert trainer.state.status == "initializing" and not trainer.state.finished
    trainer.fit(Regressor(), loader())
    assert trainer.state.finished and not trainer.state.stopped
    trainer = quiet_trainer(max_steps=1)
    with pytest.raises(RuntimeError, match="boom"):
        trainer.fit(Fails(), loader())
    assert trainer.state.status == "failed" and trainer.state.stopped and not trainer.state.finished


@pytest.mark.parametrize("name", ["limit_train_batches", "limit_val_batches", "overfit_batches"])
def test_info_line_for_one_and_one_point_zero(caplog, name):
    with caplog.at_level(logging.INFO):
        quiet_trainer(**{name: 1})
        quiet_trainer(**{name: 1.0})
        quiet_trainer(val_check_interval=1)
    assert f"`Trainer({name}=1)` was configured so 1 batch per epoch" in caplog.text
    assert f"`Trainer({name}=1.0)` was configured so 100% of the batches" in caplog.text
    assert "`Trainer(val_check_interval=1)` was configured so validation will run after every batch" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.INFO):
        quiet_trainer()
    assert "was configured" not in caplog.text


class ManualWithScheduler(Regressor):
    """Manual optimization whose scheduler the module steps itself: any object with ``step``."""

    def __init__(self, scheduler: Any) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.make_scheduler = scheduler

    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt = self.optimizers()
        opt.zero_grad()
        self.manual_backward(super().training_step(batch, batch_idx))
        opt.step()

    def on_train_epoch_end(self) -> None:
        self.lr_schedulers().step(0.0)

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return [opt], [self.make_scheduler(opt)]


class CountsSteps:
    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer, self.steps = optimizer, 0

    def step(self, metric: float) -> None:
        self.steps += 1


def test_manual_optimization_takes_any_scheduler_and_a_plateau_without_monitor():
    module = ManualWithScheduler(CountsSteps)
    quiet_trainer(max_epochs=2).fit(module, loader())
    assert module.lr_schedulers().steps == 2  # stepped by the module only
    plateau = ManualWithScheduler(torch.optim.lr_scheduler.ReduceLROnPlateau)
    quiet_trainer(max_epochs=1).fit(plateau, loader())
    with pytest.raises(TypeError, match="the scheduler CountsSteps is not a torch LR scheduler"):
        quiet_trainer(max_epochs=1).fit(AutoWithScheduler(), loader())
    with pytest.raises(ValueError, match="doesn't follow PyTorch's LRScheduler API"):  # Lightning's words and class
        quiet_trainer(max_epochs=1).fit(AutoWithScheduler(), loader())


class AutoWithScheduler(Regressor):
    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return [opt], [CountsSteps(opt)]


class ManualWithMonitorKey(ManualWithScheduler):
    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
        return [opt], [{"scheduler": plateau, "monitor": "train/loss", "interval": "step"}]


def test_manual_optimization_warns_that_monitor_is_ignored():
    trainer = quiet_trainer(max_epochs=1)
    with pytest.warns(RuntimeWarning, match=r"\['monitor'\], but the keys will be ignored"):
        trainer.fit(ManualWithMonitorKey(torch.optim.lr_scheduler.ReduceLROnPlateau), loader())
    assert trainer.lr_scheduler_configs[0].interval == "step"


def test_default_predict_step_takes_a_dataloader_idx():
    out = quiet_trainer().predict(Regressor(), [make_loader(make_regression_data(n=8).tensors[0], 8)] * 2)
    assert len(out) == 2 and out[0][0].shape == (8, 2)


def test_early_stopping_decides_nothing_in_a_fast_dev_run():
    from stoker import EarlyStopping

    stop = EarlyStopping(monitor="not_logged")  # strict: a real run would fail at the first check
    quiet_trainer(fast_dev_run=True, callbacks=[stop]).fit(Regressor(), loader(), loader())
    assert stop.wait_count == 0 and stop.stopped_epoch == -1


def test_warns_when_an_epoch_is_shorter_than_the_logging_interval():
    with pytest.warns(UserWarning, match=r"The number of training batches \(4\) is smaller than the logging interval"):
        quiet_trainer(max_epochs=1, logger=ListLogger(), log_every_n_steps=5).fit(Regressor(), loader())


class Clock:
    """``time.monotonic`` advancing one second per call: a run whose wall-clock time the test decides."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


@pytest.mark.parametrize("interval", ["00:00:00:03", {"seconds": 3}, __import__("datetime").timedelta(seconds=3)])
def test_time_based_val_check_interval(monkeypatch, interval):
    import stoker.trainer.loops as loops

    clock = Clock()
    monkeypatch.setattr(loops, "monotonic", clock)  # the loop's clock only: threads of earlier tests read theirs
    module = Regressor()
    trainer = quiet_trainer(max_epochs=2, val_check_interval=interval, num_sanity_val_steps=0)
    trainer.fit(module, loader(n=64), loader())  # 8 batches an epoch, one clock call per check
    assert trainer.val_check_seconds == 3.0 and module.validations == 5
    gated = Regressor()
    gated_trainer = quiet_trainer(max_epochs=2, val_check_interval=interval, check_val_every_n_epoch=2,
                                  num_sanity_val_steps=0)
    gated_trainer.fit(gated, loader(n=64), loader())
    monkeypatch.undo()
    assert gated.validations == 2  # the first epoch does not validate, the second every third second
    with pytest.raises(ValueError, match=r"val_check_interval='00:00:00:00'\) must be"):
        quiet_trainer(val_check_interval="00:00:00:00")


class BuildsLate(Regressor):
    def __init__(self) -> None:
        super().__init__()
        self.head: torch.nn.Module | None = None
        self.built = 0

    def configure_model(self) -> None:
        self.built += 1
        if self.head is None:
            self.head = torch.nn.Linear(2, 2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(super().forward(x))


def test_configure_model_runs_before_the_optimizers_in_every_run():
    module = BuildsLate()
    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(module, loader())
    assert module.built == 1 and any(p is module.head.weight for p in trainer.optimizers[0].param_groups[0]["params"])
    trainer.validate(module, loader())
    assert module.built == 2


def test_tensorboard_graph_of_a_module_outside_a_run(tmp_path):
    from stoker.loggers import TensorBoardLogger

    module = Regressor()
    logger = TensorBoardLogger(tmp_path, log_graph=True)
    logger.log_graph(module, torch.zeros(2, 8))  # traced without a Trainer: self.trainer is None meanwhile
    logger.finalize("success")
    assert module.training and any(p.name.startswith("events.out") for p in tmp_path.rglob("*"))
    with pytest.raises(RuntimeError, match="not attached to a `Trainer`"):
        module.trainer


def test_logger_folders_expand_home_and_variables_and_follow_overridden_names(tmp_path, monkeypatch):
    from stoker.loggers import CSVLogger, TensorBoardLogger

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("RUNS", "runs")
    assert CSVLogger("~/$RUNS", name="x", version=0).log_dir == str(tmp_path / "runs" / "x" / "version_0")

    class Named(TensorBoardLogger):
        @property
        def name(self) -> str:
            return "named"

    assert Named(tmp_path, version=1).log_dir == str(tmp_path / "named" / "version_1")


def test_fast_dev_run_with_a_model_checkpoint_creates_no_folder(tmp_path):
    from stoker import ModelCheckpoint

    checkpoint = ModelCheckpoint()
    trainer = quiet_trainer(fast_dev_run=2, default_root_dir=tmp_path, callbacks=[checkpoint])
    trainer.fit(Regressor(), loader(), loader())
    assert checkpoint.dirpath == str(tmp_path / "checkpoints") and not os.path.exists(checkpoint.dirpath)
    assert [p.name for p in tmp_path.iterdir()] in ([], ["run_summary.json"])


def test_run_facts_under_lightnings_names(tmp_path) -> None:
    import signal

    seen: dict[str, list[Any]] = {"last": [], "evaluating": [], "sanity": []}

    class Facts(Callback):
        def on_train_batch_end(self, trainer: Any, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
            seen["last"].append(trainer.is_last_batch)
            seen["evaluating"].append(trainer.evaluating)
            if trainer.current_epoch == 1 and batch_idx == 1:
                signal.raise_signal(signal.SIGTERM)  # stoker saves and stops cleanly, on every process

        def on_validation_start(self, trainer: Any, module: Any) -> None:
            seen["evaluating"].append(trainer.evaluating)
            if trainer.sanity_checking:  # its loaders are known from here (asked for after on_sanity_check_start)
                seen["sanity"].append(list(trainer.num_sanity_val_batches))

    trainer = quiet_trainer(max_epochs=3, num_sanity_val_steps=3, callbacks=[Facts()], default_root_dir=tmp_path)
    assert trainer.num_sanity_val_batches == [] and not trainer.received_sigterm  # (SIGTERM saves under it)
    with pytest.raises(SystemExit):
        trainer.fit(Regressor(), loader(32), loader(16))  # 4 train batches, 2 val batches
    assert seen["sanity"] == [[2]]  # 3 asked, 2 in the loader
    assert seen["last"] == [False, False, False, True, False, False]
    assert seen["evaluating"] == [True, False, False, False, False, True, False, False]  # sanity, 4, epoch end, 2
    assert trainer.received_sigterm and not trainer.evaluating


def test_checkpoint_is_the_base_of_checkpoint_callbacks_and_counts_as_one() -> None:
    from stoker.callbacks import Checkpoint, ModelCheckpoint

    class Mine(Checkpoint):
        def __init__(self) -> None:
            self.saves = 0

        def on_train_epoch_end(self, trainer: Any, module: Any) -> None:
            self.saves += 1

    assert isinstance(ModelCheckpoint(), Checkpoint)
    with pytest.raises(ValueError, match="enable_checkpointing=False.*Checkpoint callback"):
        quiet_trainer(enable_checkpointing=False, callbacks=[Mine()])
    mine = Mine()
    trainer = quiet_trainer(enable_checkpointing=True, max_epochs=2, callbacks=[mine])
    assert trainer.checkpoint_callbacks == [mine]  # no default ModelCheckpoint added beside it
    trainer.fit(Regressor(), loader())
    assert mine.saves == 2
