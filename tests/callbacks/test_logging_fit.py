"""Loggers and LearningRateMonitor in real fits, read back: TensorBoard with its own EventAccumulator, the CSV with csv."""

import csv
import os

import pytest
import torch

from stoker import CSVLogger, LearningRateMonitor, TensorBoardLogger
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor
from tests.helpers.trackers_readback import tensorboard_events, tensorboard_scalars


def _scalars(log_dir):
    return tensorboard_scalars(log_dir), tensorboard_events(log_dir)


def _csv(logger):
    with open(logger.metrics_file_path, newline="") as f:
        reader = csv.DictReader(f)
        return reader.fieldnames, list(reader)


def test_tensorboard_and_csv_in_one_fit(tmp_path):
    tb, csv_logger = TensorBoardLogger(tmp_path, name="tb"), CSVLogger(tmp_path, name="csv")
    t = trainer(tmp_path, max_epochs=2, logger=[tb, csv_logger], log_every_n_steps=1)
    assert t.loggers == [tb, csv_logger] and t.logger is tb and t.log_dir == tb.log_dir
    t.fit(Regressor(lr=0.03), *loaders())

    scalars, acc = _scalars(tb.log_dir)
    assert [s for s, _ in scalars["train/loss"]] == list(range(1, 9))  # against the optimizer step
    assert [s for s, _ in scalars["val/loss"]] == [4, 8]
    plugin = acc.PluginTagToContent("hparams")  # hyperparameters from save_hyperparameters()
    assert plugin and b"lr" in b"".join(plugin.values())

    fields, rows = _csv(csv_logger)
    assert fields[0] == "step" and {"train/loss", "val/loss", "epoch"} <= set(fields)
    assert [int(r["step"]) for r in rows] == list(range(1, 9))
    tb_loss = dict(scalars["train/loss"])
    for row in rows:  # the two loggers got the same numbers
        assert float(row["train/loss"]) == pytest.approx(tb_loss[int(row["step"])], rel=1e-6)
    assert [r["val/loss"] != "" for r in rows] == [False, False, False, True] * 2
    assert 'lr: 0.03' in open(os.path.join(csv_logger.log_dir, "hparams.yaml")).read()


def test_logger_true_writes_tensorboard_under_default_root(tmp_path):
    t = trainer(tmp_path, max_epochs=1, logger=True, log_every_n_steps=2)
    t.fit(Regressor(), *loaders())
    assert t.log_dir == os.path.join(str(tmp_path), "stoker_logs", "version_0")
    scalars, _ = _scalars(t.log_dir)
    assert [s for s, _ in scalars["train/loss"]] == [2, 4]


def test_loggers_are_flushed_and_closed_when_fit_fails(tmp_path):
    class Crash(Regressor):
        def training_step(self, batch, batch_idx):
            if self.trainer.global_step == 3:
                raise RuntimeError("boom")
            return super().training_step(batch, batch_idx)

    tb = TensorBoardLogger(tmp_path, name="tb", flush_secs=3600, max_queue=1000)  # nothing flushes on its own
    csv_logger = CSVLogger(tmp_path, name="csv")
    with pytest.raises(RuntimeError, match="boom"):
        trainer(tmp_path, max_epochs=2, logger=[tb, csv_logger], log_every_n_steps=1).fit(Crash(), *loaders())
    assert tb._writer is None  # closed
    scalars, _ = _scalars(tb.log_dir)
    assert [s for s, _ in scalars["train/loss"]] == [1, 2, 3]
    assert [int(r["step"]) for r in _csv(csv_logger)[1]] == [1, 2, 3]


def test_lr_monitor_per_step_and_per_param_group(tmp_path):
    tb = TensorBoardLogger(tmp_path, name="tb")
    monitor = LearningRateMonitor(logging_interval="step")
    t = trainer(tmp_path, max_epochs=2, logger=[tb], log_every_n_steps=1, callbacks=[monitor])
    t.fit(Regressor(lr=0.4, scheduler="step", groups=True), *loaders())
    # StepLR(step_size=2, gamma=0.5) stepped per optimizer step; group 2 starts at lr / 10.
    expected = [0.4 * 0.5 ** (i // 2) for i in range(8)]
    assert monitor.lrs["lr-SGD/pg1"] == pytest.approx(expected)
    assert monitor.lrs["lr-SGD/pg2"] == pytest.approx([x / 10 for x in expected])
    scalars, _ = _scalars(tb.log_dir)
    assert [s for s, _ in scalars["lr-SGD/pg1"]] == list(range(1, 9))
    assert [v for _, v in scalars["lr-SGD/pg2"]] == pytest.approx([x / 10 for x in expected])


def test_lr_monitor_per_epoch_and_default_interval_follows_the_scheduler(tmp_path):
    csv_logger = CSVLogger(tmp_path)
    by_epoch, default = LearningRateMonitor(logging_interval="epoch"), LearningRateMonitor()
    t = trainer(tmp_path, max_epochs=3, logger=[csv_logger], callbacks=[by_epoch, default])
    t.fit(Regressor(lr=1.0, scheduler="epoch"), *loaders())
    assert by_epoch.lrs["lr-SGD"] == pytest.approx([1.0, 0.1, 0.01])
    assert default.lrs["lr-SGD"] == pytest.approx([1.0, 0.1, 0.01])  # an epoch scheduler: once per epoch
    rows = [r for r in _csv(csv_logger)[1] if r["lr-SGD"] != ""]
    assert [int(r["step"]) for r in rows] == [1, 5, 9]
    assert [float(r["lr-SGD"]) for r in rows] == pytest.approx([1.0, 0.1, 0.01])


def test_lr_monitor_needs_a_logger(tmp_path):
    with pytest.raises(RuntimeError, match="logger=False"):
        trainer(tmp_path, max_epochs=1, callbacks=[LearningRateMonitor()]).fit(Regressor(), *loaders())
    # also a ValueError, the kind a renamed Lightning script catches (MisconfigurationException)
    with pytest.raises(ValueError, match="logger=False"):
        trainer(tmp_path, max_epochs=1, callbacks=[LearningRateMonitor()]).fit(Regressor(), *loaders())


class TwoOptimizers(Regressor):
    """Manual optimization: each batch steps the first layer's SGD, then the last layer's (a GAN's pattern)."""

    automatic_optimization = False

    def training_step(self, batch, batch_idx):
        for opt in self.optimizers():
            loss = torch.nn.functional.mse_loss(self(batch[0]), batch[1])
            opt.zero_grad()
            self.manual_backward(loss)
            opt.step()

    def on_train_epoch_end(self):
        for scheduler in self.lr_schedulers():
            scheduler.step()

    def configure_optimizers(self):
        first = torch.optim.SGD(self.net[0].parameters(), lr=1.0)
        last = torch.optim.SGD(self.net[-1].parameters(), lr=2.0)
        return [first, last], [torch.optim.lr_scheduler.StepLR(first, 1, gamma=0.5),
                               torch.optim.lr_scheduler.StepLR(last, 1, gamma=0.1)]


def test_lr_monitor_steps_of_several_optimizers_are_counted_per_optimizer(tmp_path):
    # 2 epochs of 4 batches, 2 optimizer steps per batch (global_step 16); every 2nd step of each optimizer
    csv_logger = CSVLogger(tmp_path)
    monitor = LearningRateMonitor(logging_interval="step")
    t = trainer(tmp_path, max_epochs=2, logger=[csv_logger], log_every_n_steps=2, callbacks=[monitor])
    t.fit(TwoOptimizers(), loaders()[0])
    assert t.global_step == 16
    assert monitor.lrs == {"lr-SGD": [1.0, 1.0, 0.5, 0.5], "lr-SGD-1": [2.0, 2.0, 0.2, 0.2]}
    rows = _csv(csv_logger)[1]
    # the first optimizer's second step is global step 3, the second's is 4 (the step each update completes)
    assert [int(r["step"]) for r in rows if r["lr-SGD"]] == [3, 7, 11, 15]
    assert [int(r["step"]) for r in rows if r["lr-SGD-1"]] == [4, 8, 12, 16]


def test_metrics_logged_every_step_stay_on_device_until_a_logger_needs_them(tmp_path, monkeypatch):
    # 32 steps, log_every_n_steps=4: 8 logger writes of one value, plus the bar's redraws at the epoch ends.
    # A per-step .item() anywhere (bar, checkpoint, loggers) would add 32 or more.
    calls = []
    real_item = torch.Tensor.item
    monkeypatch.setattr(torch.Tensor, "item", lambda self: calls.append(1) or real_item(self))
    t = trainer(tmp_path, max_epochs=2, logger=[CSVLogger(tmp_path)], log_every_n_steps=4,
                enable_progress_bar=True)
    t.fit(Regressor(), loaders(n=128)[0])
    assert len(calls) < 20, len(calls)
