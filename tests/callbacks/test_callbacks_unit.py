"""EarlyStopping, Timer and LearningRateMonitor logic against a stand-in trainer (fits: test_*_fit.py)."""

import time
from datetime import timedelta

import pytest
import torch

from stoker.callbacks import EarlyStopping, LearningRateMonitor, ModelCheckpoint, Timer
from stoker.callbacks.timer import parse_duration
from tests.callbacks.fakes import FakeTrainer
from tests.helpers.trackers_readback import ListLogger


def _validate(trainer, cb, value, name="val/loss"):
    trainer.callback_metrics[name] = torch.tensor(value)
    cb.on_validation_end(trainer, trainer.module)
    trainer.current_epoch += 1


def _fitting(tmp_path, cb, **kw):
    # Two validations per epoch: EarlyStopping checks at each one's end (once per epoch, at its end: at the epoch's).
    kw.setdefault("val_check_interval", 0.5)
    trainer = FakeTrainer(str(tmp_path), callbacks=[cb], num_val_batches=[2], fitting=True, **kw)
    cb.on_fit_start(trainer, trainer.module)
    return trainer


# -- EarlyStopping -------------------------------------------------------------------------------------------------
def test_early_stopping_stops_exactly_after_patience(tmp_path):
    stop = EarlyStopping("val/loss", patience=2)
    trainer = _fitting(tmp_path, stop)
    _validate(trainer, stop, 1.0)
    _validate(trainer, stop, 1.0)  # equal is not an improvement
    assert not trainer.should_stop
    _validate(trainer, stop, 1.5)
    assert trainer.should_stop and stop.stopped_epoch == 2


def test_early_stopping_min_delta_and_max_mode(tmp_path):
    stop = EarlyStopping("acc", mode="max", patience=1, min_delta=0.05)
    trainer = _fitting(tmp_path, stop)
    _validate(trainer, stop, 0.5, "acc")
    _validate(trainer, stop, 0.54, "acc")  # +0.04 < min_delta: not an improvement
    assert trainer.should_stop and stop.best_score == pytest.approx(0.5)


def test_early_stopping_non_finite_stops_at_once(tmp_path):
    stop = EarlyStopping("val/loss", patience=10)
    trainer = _fitting(tmp_path, stop)
    _validate(trainer, stop, float("nan"))
    assert trainer.should_stop and "not finite" in stop.stopping_reason_message


def test_early_stopping_missing_metric_names_the_existing_ones(tmp_path):
    stop = EarlyStopping("val_loss")
    trainer = _fitting(tmp_path, stop)
    trainer.callback_metrics = {"val/loss": 1.0, "train/loss": 2.0}
    with pytest.raises(RuntimeError, match=r"monitor='val_loss'.*\['train/loss', 'val/loss'\]"):
        stop.on_validation_end(trainer, trainer.module)
    lenient = EarlyStopping("val_loss", strict=False)
    with pytest.warns(RuntimeWarning, match="Available metrics"):
        lenient.on_fit_start(trainer, trainer.module)
        lenient.on_validation_end(trainer, trainer.module)
    assert not trainer.should_stop


def test_early_stopping_checks_at_epoch_end_only_without_validation(tmp_path):
    stop = EarlyStopping("loss", patience=1)
    trainer = _fitting(tmp_path, stop)
    trainer.callback_metrics = {"loss": 1.0}
    stop.on_train_epoch_end(trainer, trainer.module)  # there is validation: the epoch end does not count
    assert stop.best_score == float("inf")
    trainer.num_val_batches = []
    stop.on_train_epoch_end(trainer, trainer.module)
    stop.on_train_epoch_end(trainer, trainer.module)
    assert trainer.should_stop


def test_early_stopping_outside_fit_does_nothing(tmp_path):
    stop = EarlyStopping("val/loss", patience=0)
    trainer = FakeTrainer(str(tmp_path), callbacks=[stop], callback_metrics={"val/loss": 1.0})
    stop.on_validation_end(trainer, trainer.module)  # trainer.validate(): no on_fit_start
    assert not trainer.should_stop


def test_early_stopping_state_round_trip(tmp_path):
    stop = EarlyStopping("val/loss", patience=3)
    trainer = _fitting(tmp_path, stop)
    for value in (1.0, 2.0, 2.0):
        _validate(trainer, stop, value)
    restored = EarlyStopping("val/loss", patience=3)
    restored.load_state_dict(stop.state_dict())
    assert (restored.wait_count, restored.best_score) == (2, 1.0)
    trainer = _fitting(tmp_path, restored)
    _validate(trainer, restored, 3.0)
    assert trainer.should_stop


def test_early_stopping_argument_errors_quote_the_value():
    with pytest.raises(ValueError, match="mode='lowest'"):
        EarlyStopping("x", mode="lowest")
    with pytest.raises(ValueError, match="patience=-1"):
        EarlyStopping("x", patience=-1)
    with pytest.raises(ValueError, match="min_delta=-0.1"):
        EarlyStopping("x", min_delta=-0.1)


# -- Timer ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec, seconds", [
    (timedelta(minutes=2), 120), ("00:01:00:05", 3605), ("1:00:00:00", 86400), ({"hours": 1, "minutes": 1}, 3660),
])
def test_timer_duration_forms(spec, seconds):
    assert parse_duration(spec).total_seconds() == seconds


@pytest.mark.parametrize("spec, error", [
    ("12:00", "DD:HH:MM:SS"), ({"hour": 1}, "unknown key"), (3600, "timedelta"), (timedelta(seconds=-1), "negative"),
])
def test_timer_bad_duration_errors(spec, error):
    with pytest.raises((ValueError, TypeError), match=error):
        Timer(spec)


def test_timer_stops_at_a_step_boundary_with_a_last_checkpoint(tmp_path, capsys):
    ckpt = ModelCheckpoint()
    timer = Timer({"seconds": 0})
    trainer = FakeTrainer(str(tmp_path), callbacks=[ckpt, timer])
    ckpt.setup(trainer, trainer.module, "fit")
    timer.on_train_start(trainer, trainer.module)
    trainer.window_closed = False
    timer.on_train_batch_end(trainer, trainer.module, None, None, 0)  # global_step unchanged: mid-window
    assert not trainer.should_stop
    trainer.global_step, trainer.window_closed = 1, True
    timer.on_train_batch_end(trainer, trainer.module, None, None, 1)
    assert trainer.should_stop and trainer.saves == ["last.ckpt"]
    assert "Timer: duration" in capsys.readouterr().out
    timer.on_train_epoch_end(trainer, trainer.module)
    assert trainer.saves == ["last.ckpt"]  # stops once


def test_timer_without_checkpoint_callback_saves_under_default_root(tmp_path):
    timer = Timer("00:00:00:00", interval="epoch")
    trainer = FakeTrainer(str(tmp_path), callbacks=[timer])
    timer.on_train_start(trainer, trainer.module)
    trainer.global_step = 1
    timer.on_train_batch_end(trainer, trainer.module, None, None, 0)
    assert not trainer.should_stop  # interval="epoch"
    timer.on_train_epoch_end(trainer, trainer.module)
    assert trainer.should_stop and (tmp_path / "checkpoints" / "last.ckpt" / "state.json").is_file()


def test_timer_elapsed_survives_state_round_trip(tmp_path):
    timer = Timer()
    trainer = FakeTrainer(str(tmp_path), callbacks=[timer])
    timer.on_train_start(trainer, trainer.module)
    time.sleep(0.05)
    timer.on_validation_start(trainer, trainer.module)
    time.sleep(0.02)
    timer.on_validation_end(trainer, trainer.module)
    state = timer.state_dict()
    assert state["time_elapsed"]["train"] >= 0.07 and state["time_elapsed"]["validate"] >= 0.02
    resumed = Timer(duration={"seconds": 10})
    resumed.load_state_dict(state)
    assert resumed.time_elapsed("train") == pytest.approx(state["time_elapsed"]["train"])
    resumed.on_train_start(trainer, trainer.module)
    time.sleep(0.02)
    assert resumed.time_elapsed("train") >= state["time_elapsed"]["train"] + 0.02
    assert resumed.time_remaining("train") < 10 - 0.09
    with pytest.raises(ValueError, match="'fit'"):
        resumed.time_elapsed("fit")


# -- LearningRateMonitor -------------------------------------------------------------------------------------------
def test_lr_monitor_names_per_param_group_and_repeated_optimizer_classes(tmp_path):
    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    adamw = torch.optim.AdamW([{"params": a.weight}, {"params": a.bias, "lr": 0.5}], lr=0.1)
    sgd1 = torch.optim.SGD(b.parameters(), lr=0.2, momentum=0.9)
    sgd2 = torch.optim.SGD([{"params": b.weight, "name": "head"}, {"params": b.bias}], lr=0.3)
    logger = ListLogger()
    monitor = LearningRateMonitor(logging_interval="epoch", log_momentum=True)
    trainer = FakeTrainer(str(tmp_path), callbacks=[monitor], optimizers=[adamw, sgd1, sgd2], loggers=[logger])
    monitor.on_train_start(trainer, trainer.module)
    monitor.on_train_epoch_start(trainer, trainer.module)
    assert logger.rows == [(1, {
        "lr-AdamW/pg1": 0.1, "lr-AdamW/pg1-momentum": 0.9, "lr-AdamW/pg2": 0.5, "lr-AdamW/pg2-momentum": 0.9,
        "lr-SGD": 0.2, "lr-SGD-momentum": 0.9,
        "lr-SGD-1/head": 0.3, "lr-SGD-1/head-momentum": 0.0, "lr-SGD-1/pg2": 0.3, "lr-SGD-1/pg2-momentum": 0.0,
    })]
    assert list(monitor.lrs) == ["lr-AdamW/pg1", "lr-AdamW/pg2", "lr-SGD", "lr-SGD-1/head", "lr-SGD-1/pg2"]
    assert monitor.last_momentum_values["lr-SGD-momentum"] == 0.9


def test_lr_monitor_names_a_single_named_group_and_refuses_a_shared_group_name(tmp_path):
    layer = torch.nn.Linear(2, 2)
    named = torch.optim.SGD([{"params": layer.parameters(), "name": "head"}], lr=0.1)
    plain = torch.optim.ASGD(torch.nn.Linear(2, 2).parameters(), lr=0.2, weight_decay=0.01)
    logger = ListLogger()
    monitor = LearningRateMonitor(logging_interval="epoch", log_momentum=True, log_weight_decay=True)
    trainer = FakeTrainer(str(tmp_path), callbacks=[monitor], optimizers=[named, plain], loggers=[logger])
    monitor.on_train_start(trainer, trainer.module)
    with pytest.warns(RuntimeWarning, match="do not have momentum"):  # ASGD has neither momentum nor betas
        monitor.on_train_epoch_start(trainer, trainer.module)
    assert logger.rows == [(1, {"lr-SGD/head": 0.1, "lr-SGD/head-momentum": 0.0, "lr-SGD/head-weight_decay": 0.0,
                                "lr-ASGD": 0.2, "lr-ASGD-momentum": 0.0, "lr-ASGD-weight_decay": 0.01})]
    shared = torch.optim.SGD([{"params": layer.weight, "name": "x"}, {"params": layer.bias, "name": "x"}], lr=0.1)
    trainer = FakeTrainer(str(tmp_path), callbacks=[monitor], optimizers=[shared], loggers=[logger])
    with pytest.raises(ValueError, match="^A single `Optimizer` cannot have multiple parameter groups with identical "
                                         "`name` values. .*share a name"):  # Lightning's sentence first
        monitor.on_train_start(trainer, trainer.module)


def test_lr_monitor_without_logger_is_an_error(tmp_path):
    monitor = LearningRateMonitor()
    trainer = FakeTrainer(str(tmp_path), callbacks=[monitor])
    with pytest.raises(RuntimeError, match="^Cannot use `LearningRateMonitor` callback with `Trainer` that has no "
                                           "logger. .*logger=False"):
        monitor.on_train_start(trainer, trainer.module)
    with pytest.raises(ValueError, match="'steps'"):
        LearningRateMonitor(logging_interval="steps")
