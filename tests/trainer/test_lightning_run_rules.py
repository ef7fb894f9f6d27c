"""Lightning's run rules on stoker.Trainer: ``overfit_batches``, the loaders each stage was given, the module attached
while its loader hooks run, ``validation_step = None``, ``fast_dev_run``'s value, and what ``on_train_epoch_end``
logs being visible to callbacks at that same epoch end."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch.utils.data import DataLoader, RandomSampler, SequentialSampler

from stoker import Callback, Trainer
from stoker.callbacks import EarlyStopping, EarlyStoppingReason
from stoker.trainer.states import RunningStage, TrainerFn
from tests.callbacks.modules import loaders
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.trainers import quiet_trainer


def quiet(root, **kw) -> Trainer:
    return Trainer(default_root_dir=str(root), logger=False, enable_progress_bar=False, enable_checkpointing=False,
                   enable_model_summary=False, seed=0, **kw)


class Seen(Regressor):
    """Records the inputs of every training and validation batch."""

    def __init__(self) -> None:
        super().__init__()
        self.train_x: list[torch.Tensor] = []
        self.val_x: list[torch.Tensor] = []

    def training_step(self, batch, batch_idx):
        self.train_x.append(batch[0].clone())
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch, batch_idx):
        self.val_x.append(batch[0].clone())
        return super().validation_step(batch, batch_idx)


def test_overfit_batches_reads_the_same_first_batches_in_order_every_epoch(tmp_path):
    data = make_regression_data(64)
    train = DataLoader(data, batch_size=8, shuffle=True)
    module = Seen()
    t = quiet(tmp_path, max_epochs=3, overfit_batches=2, num_sanity_val_steps=0)
    with pytest.warns(UserWarning, match="RandomSampler is replaced by a SequentialSampler") as caught:
        t.fit(module, train, DataLoader(make_regression_data(32, seed=1), batch_size=8))
    # Lightning's words begin the warning, so a filter or a test written for Lightning's warning matches it
    assert any("requested to overfit but enabled train dataloader shuffling" in str(w.message) for w in caught)
    assert t.overfit_batches == 2 and t.num_training_batches == 2 and t.num_val_batches == [2]
    assert len(module.train_x) == 6 and len(module.val_x) == 6
    first = data[0:8][0]
    for epoch in range(3):  # in dataset order, the same two batches each epoch
        torch.testing.assert_close(module.train_x[2 * epoch], first)
    assert isinstance(t.val_dataloaders.sampler, SequentialSampler)
    assert isinstance(train.sampler, RandomSampler)  # the user's loader itself is untouched


def test_overfit_batches_fraction_and_bad_values(tmp_path):
    t = quiet(tmp_path, max_epochs=1, overfit_batches=0.25)
    t.fit(Regressor(), DataLoader(make_regression_data(64), batch_size=8))
    assert t.num_training_batches == 2
    for bad in (-1, 1.5, "2"):
        with pytest.raises(ValueError, match="overfit_batches"):
            quiet(tmp_path, overfit_batches=bad)


class TwoVal(Regressor):
    def validation_step(self, batch, batch_idx, dataloader_idx=0):
        return super().validation_step(batch, batch_idx)

    def predict_step(self, batch, batch_idx, dataloader_idx=0):
        return self(batch[0])


def test_stage_loaders_are_the_loaders_each_run_was_given(tmp_path):
    train, val = loaders()
    other = DataLoader(make_regression_data(8, seed=2), batch_size=4)
    t = quiet(tmp_path, max_epochs=1)
    assert t.val_dataloaders is None and t.test_dataloaders is None and t.predict_dataloaders is None
    t.fit(Regressor(), train, val)
    assert t.val_dataloaders is val
    t.validate(TwoVal(), [val, other])
    assert t.val_dataloaders == [val, other]
    t.test(Regressor(), other)
    t.predict(TwoVal(), [other])
    assert t.test_dataloaders is other and t.predict_dataloaders is other


def test_loaders_given_in_a_dict_or_a_combined_loader_come_back_in_it(tmp_path):
    from stoker.utilities import CombinedLoader

    train, val = loaders()
    other = DataLoader(make_regression_data(8, seed=2), batch_size=4)
    t = quiet(tmp_path, max_epochs=1)
    named = {"a": val, "b": other}
    t.fit(TwoVal(), train, named)
    assert t.val_dataloaders is named  # as Lightning gives it back
    t.validate(TwoVal(), CombinedLoader([val, other], "sequential"))
    assert t.val_dataloaders == [val, other]  # a CombinedLoader's iterables
    t.validate(Regressor(), val)
    assert t.val_dataloaders is val  # the latest run's, not the dict of an earlier one


def test_the_module_is_attached_while_its_loader_hooks_run(tmp_path):
    class FromHooks(Regressor):
        def train_dataloader(self):
            self.seen = self.trainer  # raises when not attached
            return loaders()[0]

        def val_dataloader(self):
            assert self.trainer.max_epochs == 1
            return loaders()[1]

    module = FromHooks()
    t = quiet(tmp_path, max_epochs=1)
    t.fit(module)
    assert module.seen is t


def test_validation_step_set_to_none_turns_validation_off(tmp_path):
    module = Seen()
    module.validation_step = None
    t = quiet(tmp_path, max_epochs=1)
    with pytest.warns(UserWarning, match="has no validation_step"):
        t.fit(module, *loaders())
    assert t.num_val_batches == [] and module.val_x == [] and t.global_step == 4


def test_a_validation_step_without_val_loaders_and_the_reverse_warn_in_lightnings_words(tmp_path):
    train, val = loaders()
    with pytest.warns(UserWarning, match=r"^You defined a `validation_step` but have no `val_dataloader`\. Skipping"):
        quiet(tmp_path, max_epochs=1).fit(Seen(), train)

    class HookOnly(Seen):
        validation_step = None

        def val_dataloader(self):
            return val

    with pytest.warns(UserWarning, match=r"^You passed in a `val_dataloader` but have no `validation_step`\. Skip"):
        quiet(tmp_path, max_epochs=1).fit(HookOnly(), train)
    with warnings.catch_warnings(record=True) as caught:  # overfit_batches validates on the train loader
        warnings.simplefilter("always")
        quiet(tmp_path, max_epochs=1, overfit_batches=2).fit(Seen(), loaders(shuffle=False)[0])
        quiet(tmp_path, max_epochs=1).fit(Seen(), train, val)
    assert not [w for w in caught if "Skipping val loop" in str(w.message)]


def test_a_missing_step_method_is_caught_as_either_error_in_lightnings_words(tmp_path):
    class NoStep(Regressor):
        training_step = None

    class NoVal(Regressor):
        validation_step = None

    for error in (TypeError, ValueError):  # TypeError by stoker's rule; ValueError: MisconfigurationException's
        with pytest.raises(error, match=r"^No `training_step\(\)` method defined: NoStep does not define"):
            quiet(tmp_path, max_epochs=1).fit(NoStep(), loaders()[0])
        with pytest.raises(error, match=r"^No `validation_step\(\)` method defined: Trainer.validate\(\) needs"):
            quiet(tmp_path).validate(NoVal(), loaders()[1])
        inputs = DataLoader(torch.randn(8, 8), batch_size=4)
        for name in ("predict_step", "forward"):
            module = Regressor()
            setattr(module, name, None)
            with pytest.raises(error, match=rf"^`{name}` cannot be None: Trainer.predict\(\) needs {name}"):
                quiet(tmp_path).predict(module, inputs)


@pytest.mark.parametrize("value, expected", [(True, True), (1, True), (3, 3), (False, False), (0, 0)])
def test_fast_dev_run_keeps_lightnings_value(tmp_path, value, expected):
    assert quiet(tmp_path, fast_dev_run=value).fast_dev_run == expected


def test_states_are_string_enums():
    assert RunningStage.VALIDATING == "validate" and TrainerFn.FITTING == "fit"


def test_a_value_logged_in_the_modules_epoch_end_is_seen_by_callbacks_then(tmp_path):
    class LogsAtEpochEnd(Regressor):
        def on_train_epoch_end(self):
            self.log("epoch_metric", float(self.current_epoch))

    class Reader(Callback):
        seen: list[float | None] = []

        def on_train_epoch_end(self, trainer, module):
            value = trainer.callback_metrics.get("epoch_metric")
            self.seen.append(None if value is None else float(value))

    # A plain callback runs before the module (Lightning's order): it sees the value of the epoch before; only
    # checkpointing and early stopping run after the module and see this epoch's.
    reader = Reader()
    quiet(tmp_path, max_epochs=2, callbacks=[reader]).fit(LogsAtEpochEnd(), loaders()[0])
    assert reader.seen == [None, 0.0]
    stop = EarlyStopping("epoch_metric", mode="max", stopping_threshold=0.5, check_on_train_epoch_end=True)
    t = quiet(tmp_path, max_epochs=5, callbacks=[stop])
    t.fit(LogsAtEpochEnd(), loaders()[0])
    assert t.current_epoch == 2 and stop.stopping_reason is EarlyStoppingReason.STOPPING_THRESHOLD


def test_early_stopping_reason_and_message_round_trip():
    stop = EarlyStopping("val/loss")
    assert stop.stopping_reason is EarlyStoppingReason.NOT_STOPPED and stop.stopping_reason_message is None
    stop.stopping_reason, stop.stopping_reason_message = EarlyStoppingReason.PATIENCE_EXHAUSTED, "gave up"
    again = EarlyStopping("val/loss")
    again.load_state_dict(stop.state_dict())
    assert again.stopping_reason is EarlyStoppingReason.PATIENCE_EXHAUSTED and again.stopping_reason_message == "gave up"
    old = {k: v for k, v in stop.state_dict().items() if not k.startswith("stopping_reason")}
    again.load_state_dict(old)  # a checkpoint written before the reason was saved
    assert again.stopping_reason is EarlyStoppingReason.NOT_STOPPED and again.stopping_reason_message is None


def test_accumulate_grad_batches_and_progress_bar_callback(tmp_path):
    from stoker.callbacks import ProgressBar

    t = quiet(tmp_path, accumulate_grad_batches=3)
    assert t.accumulate_grad_batches == 3 == t.accumulate and t.progress_bar_callback is None
    t.accumulate_grad_batches = 2
    assert t.accumulate == 2
    shown = Trainer(default_root_dir=str(tmp_path), logger=False)
    assert isinstance(shown.progress_bar_callback, ProgressBar)


def test_checkpoint_dirpath_expands_the_home_folder(monkeypatch, tmp_path):
    from stoker.callbacks import ModelCheckpoint

    monkeypatch.setenv("HOME", str(tmp_path))
    assert ModelCheckpoint(dirpath="~/ckpts").dirpath == str(tmp_path / "ckpts")


def test_log_reduce_fx_takes_pythons_max_min_and_sum(tmp_path):
    class Logs(Regressor):
        def training_step(self, batch, batch_idx):
            for fn in (max, min, sum):
                self.log(f"b_{fn.__name__}", float(batch_idx), on_step=False, on_epoch=True, reduce_fx=fn)
            return super().training_step(batch, batch_idx)

    t = quiet(tmp_path, max_epochs=1)
    t.fit(Logs(), loaders()[0])
    metrics = {k: float(v) for k, v in t.callback_metrics.items() if k.startswith("b_")}
    assert metrics == {"b_max": 3.0, "b_min": 0.0, "b_sum": 6.0}


def test_the_status_is_lightnings_and_interrupted_tells_a_stop_from_a_failure():
    from stoker.trainer.states import TrainerState, TrainerStatus

    class Stops(Regressor):
        def __init__(self, error: BaseException) -> None:
            super().__init__()
            self.error, self.seen = error, []

        def training_step(self, batch, batch_idx):
            self.seen.append(self.trainer.state.status)
            raise self.error

    trainer = quiet_trainer(max_steps=2)
    assert trainer.state == TrainerState(status=TrainerStatus.INITIALIZING, fn=None, stage=None)
    for error, status in ((KeyboardInterrupt(), TrainerStatus.INTERRUPTED), (RuntimeError("x"), TrainerStatus.FAILED)):
        module = Stops(error)
        with pytest.raises(type(error)):
            trainer.fit(module, make_loader(make_regression_data(n=8)))
        assert module.seen == [TrainerStatus.RUNNING] and trainer.state.status == status
        assert trainer.interrupted is (status is TrainerStatus.INTERRUPTED)


def test_each_run_starts_with_empty_metrics(tmp_path):
    seen = {}

    class Looks(Callback):
        def on_test_start(self, trainer, module):
            seen["test"] = (dict(trainer.callback_metrics), dict(trainer.logged_metrics),
                            dict(trainer.progress_bar_metrics))

    class Logs(Regressor):
        def test_step(self, batch, batch_idx):
            self.log("test/x", 1.0)

    trainer = quiet_trainer(max_steps=2, callbacks=[Looks()])
    module = Logs(prog_bar=True)
    trainer.fit(module, make_loader(make_regression_data(n=16)))
    assert "train/loss" in trainer.callback_metrics
    trainer.test(module, make_loader(make_regression_data(n=16)))
    assert seen["test"] == ({}, {}, {}) and set(trainer.callback_metrics) == {"test/x"}


def test_the_data_module_hears_of_an_exception(tmp_path):
    from stoker import DataModule

    heard = []

    class Data(DataModule):
        def train_dataloader(self):
            return make_loader(make_regression_data(n=16))

        def on_exception(self, exception):
            heard.append(exception)

    class Breaks(Regressor):
        def on_fit_start(self):
            raise RuntimeError("broken")

    with pytest.raises(RuntimeError, match="broken"):
        quiet_trainer(max_steps=2).fit(Breaks(), datamodule=Data())
    assert [str(e) for e in heard] == ["broken"]


def test_a_root_dir_under_home_is_expanded(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    assert quiet_trainer(default_root_dir="~/runs").default_root_dir == str(tmp_path / "runs")


def test_ckpt_path_last_with_nothing_saved_warns_and_goes_on(tmp_path):
    # fit: a fresh start, with Lightning's warning (a script may pass "last" before its first run)
    t = quiet(tmp_path, max_epochs=1)
    with pytest.warns(UserWarning, match=r'\.fit\(ckpt_path="last"\) is set, .* No checkpoint will be loaded'):
        t.fit(Regressor(), make_loader(make_regression_data(32)), ckpt_path="last")
    assert t.ckpt_path is None and t.global_step == 4
    # validate: the module's weights as they are (not an error), with the same warning
    module = Regressor()
    before = {k: v.clone() for k, v in module.state_dict().items()}
    with pytest.warns(UserWarning, match=r'\.validate\(ckpt_path="last"\) is set, .* No checkpoint will be loaded'):
        (result,) = quiet(tmp_path / "other", max_epochs=1).validate(module, make_loader(make_regression_data(16)), ckpt_path="last")
    assert "val/loss" in result
    assert all(torch.equal(before[k], v) for k, v in module.state_dict().items())
