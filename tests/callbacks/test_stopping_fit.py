"""EarlyStopping and Timer inside real fits."""

import pytest

from stoker import EarlyStopping, Timer
from stoker.trainer.checkpointing import checkpoint_step
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor


class EpochLoss(Regressor):
    """No validation: logs an epoch-level training metric instead."""

    def training_step(self, batch, batch_idx):
        loss = super().training_step(batch, batch_idx)
        self.log("train/epoch_loss", loss, on_step=False, on_epoch=True)
        return loss


def test_early_stopping_stops_after_patience_validations(tmp_path):
    stop = EarlyStopping("val/score", patience=2)
    module = Regressor(val_scores=[1.0, 0.5, 0.6, 0.7, 0.4, 0.3])
    t = trainer(tmp_path, max_epochs=6, callbacks=[stop], num_sanity_val_steps=0)
    t.fit(module, *loaders())
    assert module.validations == 4 and t.current_epoch == 4  # epochs 0-3 ran; stopped after epoch 3's check
    assert stop.stopped_epoch == 3 and stop.best_score == 0.5 and t.should_stop
    # The checkpoint written at that epoch's end holds the stopped state.
    assert checkpoint_step(str(tmp_path / "checkpoints" / "epoch=3-step=16.ckpt")) == 16


def test_early_stopping_without_validation_checks_each_epoch_end(tmp_path):
    stop = EarlyStopping("train/epoch_loss", mode="max", patience=1)  # the loss falls: "max" never improves
    t = trainer(tmp_path, max_epochs=5, callbacks=[stop])
    t.fit(EpochLoss(), loaders()[0])
    assert stop.stopped_epoch == 1 and t.global_step == 8


class EpochEndValue(Regressor):
    """Validates every epoch, and logs a value computed in its own ``on_train_epoch_end`` (no training_epoch_end in
    Lightning 2: epoch values are logged there)."""

    def __init__(self, values):
        super().__init__()
        self.values = values

    def on_train_epoch_end(self):
        self.log("epoch_value", float(self.values[self.current_epoch]))


@pytest.mark.parametrize("val_check_interval, stopped_epoch", [(1.0, 2), (0.5, None)])
def test_early_stopping_by_default_checks_once_a_validated_epoch_has_ended(tmp_path, val_check_interval,
                                                                           stopped_epoch):
    """Lightning's rule for ``check_on_train_epoch_end=None``: with one validation at each epoch's end the check
    runs at the epoch's end, after the module's ``on_train_epoch_end``, so it sees what that hook logged (it used to
    run at the validation's end and find no such metric); with several validations per epoch, after each of them
    (then a value that only the epoch's end logs is missing at the first one)."""
    stop = EarlyStopping("epoch_value", patience=1)
    t = trainer(tmp_path, max_epochs=5, callbacks=[stop], num_sanity_val_steps=0, val_check_interval=val_check_interval)
    if stopped_epoch is None:
        with pytest.raises(RuntimeError, match="found no metric 'epoch_value'"):
            t.fit(EpochEndValue([1.0, 0.5, 0.9, 0.9, 0.9]), *loaders())
        return
    t.fit(EpochEndValue([1.0, 0.5, 0.9, 0.9, 0.9]), *loaders())
    assert stop.stopped_epoch == stopped_epoch and stop.best_score == 0.5 and t.current_epoch == 3


def test_early_stopping_missing_metric_error_names_the_logged_metrics(tmp_path):
    stop = EarlyStopping("val_loss")
    with pytest.raises(RuntimeError) as info:
        trainer(tmp_path, max_epochs=2, callbacks=[stop]).fit(Regressor(), *loaders())
    message = str(info.value)
    assert "EarlyStopping(monitor='val_loss')" in message
    assert "'train/loss'" in message and "'val/loss'" in message


def test_timer_stops_the_fit_with_a_resumable_checkpoint(tmp_path):
    timer = Timer({"seconds": 0})
    t = trainer(tmp_path, max_epochs=3, callbacks=[timer])
    t.fit(Regressor(), *loaders())
    assert t.global_step == 1 and timer.stopped  # the first applied step is past a zero duration
    assert checkpoint_step(str(tmp_path / "checkpoints" / "last.ckpt")) == 1

    resumed = trainer(tmp_path, max_epochs=1, callbacks=[Timer()])  # elapsed time: see test_resume_fit.py
    resumed.fit(Regressor(), *loaders(), ckpt_path="last")
    assert resumed.global_step == 4  # the rest of epoch 0


def test_timer_without_a_checkpoint_callback_still_saves_last(tmp_path):
    t = trainer(tmp_path, max_epochs=2, enable_checkpointing=False, accumulate=2, callbacks=[Timer("00:00:00:00")])
    t.fit(Regressor(), *loaders())
    assert t.global_step == 1 and t.checkpoint_callback is None
    assert checkpoint_step(str(tmp_path / "checkpoints" / "last.ckpt")) == 1


def test_a_resumed_timer_with_its_duration_used_up_stops_before_the_first_step(tmp_path):
    train, val = loaders()
    first = trainer(tmp_path, max_epochs=1, callbacks=[Timer(duration={"seconds": 3600})])
    first.fit(Regressor(), train, val)
    spent = Timer(duration={"milliseconds": 1})  # less than the first run already took
    resumed = trainer(tmp_path, max_epochs=3, callbacks=[spent])
    resumed.fit(Regressor(), train, val, ckpt_path="last")
    assert resumed.global_step == first.global_step and spent.stopped
