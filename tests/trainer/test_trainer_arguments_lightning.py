"""Lightning's Trainer behaviours beyond the core's names: loggers of any kind (and custom loggers with their own
version), ``barebones=True``, ``PL_TRAINER_*`` environment defaults, Lightning arguments at inert values, eval
samplers that follow the fit's epoch, predict's warning for a missing return, combined loaders of plain values,
stateless callbacks sharing a state key, and the errors for an evaluation without a module."""

from __future__ import annotations

import os
import warnings

import pytest
import torch
from torch.utils.data import DataLoader, RandomSampler

from stoker import Trainer
from stoker.trainer import RunOptions
from stoker.trainer import Trainer as CoreTrainer
from tests.helpers.models import Regressor, make_loader, make_regression_data


class RecordingLogger:
    """Not a stoker Logger: only the methods a Trainer calls, recording what it was given."""

    def __init__(self) -> None:
        self.metrics: list[tuple[dict, int | None]] = []
        self.params: list[dict] = []
        self.finalized: list[str] = []

    def log_metrics(self, metrics, step=None):
        self.metrics.append((dict(metrics), step))

    def log_hyperparams(self, params):
        self.params.append(dict(params))

    def log_graph(self, model, input_array=None):
        pass

    def save(self):
        pass

    def after_save_checkpoint(self, checkpoint_callback):
        pass

    def finalize(self, status):
        self.finalized.append(status)


def _data():
    return make_loader(make_regression_data(32), 8), make_loader(make_regression_data(16, seed=3), 8)


def test_an_object_with_the_logger_methods_is_called_as_a_logger(tmp_path):
    recorder = RecordingLogger()
    trainer = Trainer(default_root_dir=tmp_path, max_epochs=1, logger=recorder, log_every_n_steps=1,
                      enable_progress_bar=False, enable_model_summary=False)
    assert trainer.logger is recorder and trainer.loggers == [recorder]
    trainer.fit(Regressor(), *_data())
    assert any("train/loss" in metrics for metrics, _ in recorder.metrics)
    assert any("val/loss" in metrics for metrics, _ in recorder.metrics)
    assert recorder.finalized == ["success"]
    # it has no folder of ours: checkpoints and the log folder fall back to default_root_dir
    assert trainer.checkpoint_callback.dirpath == os.path.abspath(os.path.join(tmp_path, "checkpoints"))
    assert trainer.log_dir == str(tmp_path)


def test_a_foreign_logger_beside_a_stoker_logger_leaves_the_folders_to_the_stoker_one(tmp_path):
    recorder = RecordingLogger()
    trainer = Trainer(default_root_dir=tmp_path, max_epochs=1, logger=[recorder, "csv"], log_every_n_steps=1,
                      enable_progress_bar=False, enable_model_summary=False)
    assert trainer.loggers[0] is recorder and type(trainer.loggers[1]).__name__ == "CSVLogger"
    trainer.fit(Regressor(), *_data())
    assert trainer.log_dir == trainer.loggers[1].log_dir
    assert trainer.checkpoint_callback.dirpath.startswith(os.path.abspath(trainer.loggers[1].log_dir))


@pytest.mark.parametrize("bad, words", [
    (3, "int is none of them"),
    (RecordingLogger, "RecordingLogger is a class: pass an instance"),
    (object(), "it lacks log_metrics"),
])
def test_a_logger_argument_that_is_no_logger_is_a_type_error(tmp_path, bad, words):
    with pytest.raises(TypeError, match=words):
        Trainer(default_root_dir=tmp_path, logger=bad)


def test_a_misspelt_logger_name_is_still_refused(tmp_path):
    with pytest.raises(ValueError, match="tensorbord"):
        Trainer(default_root_dir=tmp_path, logger="tensorbord")


def test_barebones_turns_off_every_extra_and_self_log(tmp_path):
    trainer = Trainer(default_root_dir=tmp_path, barebones=True, max_epochs=1)
    assert trainer.barebones and trainer.loggers == [] and trainer.callbacks == []
    assert trainer.checkpoint_callback is None and not trainer.options.record_logged_values
    module = Regressor()
    with pytest.warns(UserWarning, match=r"self.log\('train/loss'\) records nothing"):
        trainer.fit(module, *_data())
    assert trainer.callback_metrics == {} and trainer.global_step == 4


@pytest.mark.parametrize("argument", [
    {"enable_checkpointing": True}, {"logger": True}, {"logger": "csv"}, {"enable_progress_bar": True},
    {"enable_model_summary": True}, {"log_every_n_steps": 5}, {"num_sanity_val_steps": 2}, {"fast_dev_run": 1},
    {"detect_anomaly": True}, {"profiler": "simple"},
])
def test_barebones_refuses_what_it_turns_off(tmp_path, argument):
    (name, value), = argument.items()
    with pytest.raises(ValueError, match=rf"^`Trainer\(barebones=True, {name}={value!r}\)` was passed: barebones turns "
                                         "off"):
        Trainer(default_root_dir=tmp_path, barebones=True, **argument)


def test_barebones_takes_the_off_values(tmp_path):
    trainer = Trainer(default_root_dir=tmp_path, barebones=True, logger=False, enable_checkpointing=False,
                      log_every_n_steps=0, num_sanity_val_steps=0, fast_dev_run=False, profiler=None)
    assert trainer.loggers == []


def test_record_logged_values_false_in_the_core_trainer(tmp_path):
    trainer = CoreTrainer(default_root_dir=tmp_path, max_epochs=1, logger=False, enable_checkpointing=False,
                          enable_progress_bar=False, options=RunOptions(record_logged_values=False))
    with pytest.warns(UserWarning, match="records nothing"):
        trainer.fit(Regressor(), *_data())
    assert trainer.callback_metrics == {}
    with pytest.raises(TypeError, match="record_logged_values"):
        RunOptions(record_logged_values="no")


def test_environment_variables_are_defaults_that_arguments_override(tmp_path, monkeypatch):
    monkeypatch.setenv("PL_TRAINER_MAX_STEPS", "7")
    monkeypatch.setenv("PL_TRAINER_LOGGER", "False")
    monkeypatch.setenv("PL_TRAINER_DEFAULT_ROOT_DIR", str(tmp_path))  # not a literal: kept as text
    monkeypatch.setenv("PL_TRAINER_ACCUMULATE_GRAD_BATCHES", "")  # empty: not given
    monkeypatch.setenv("PL_TRAINER_NO_SUCH_ARGUMENT", "1")  # not an argument: ignored
    trainer = Trainer()
    assert trainer.max_steps == 7 and trainer.logger is None and trainer.default_root_dir == str(tmp_path)
    trainer = Trainer(max_steps=42, logger="csv")
    assert trainer.max_steps == 42 and type(trainer.logger).__name__ == "CSVLogger"


def test_environment_defaults_follow_a_subclass_name_and_are_checked(tmp_path, monkeypatch):
    class MyTrainer(Trainer):
        pass

    monkeypatch.setenv("PL_MYTRAINER_MAX_EPOCHS", "3")
    monkeypatch.setenv("PL_TRAINER_MAX_EPOCHS", "9")
    assert MyTrainer(default_root_dir=tmp_path).max_epochs == 3
    monkeypatch.setenv("PL_TRAINER_MAX_EPOCHS", "many")
    with pytest.raises(ValueError, match="max_epochs='many'"):
        Trainer(default_root_dir=tmp_path)


class _EpochSampler(RandomSampler):
    def __init__(self, data) -> None:
        super().__init__(data)
        self.epochs: list[int] = []

    def set_epoch(self, epoch: int) -> None:
        self.epochs.append(epoch)


def test_eval_loaders_samplers_get_the_fit_epoch(tmp_path):
    data = make_regression_data(16, seed=3)
    sampler = _EpochSampler(data)
    val = DataLoader(data, batch_size=8, sampler=sampler)
    trainer = Trainer(default_root_dir=tmp_path, max_epochs=2, logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, use_distributed_sampler=False, num_sanity_val_steps=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer.fit(Regressor(), make_loader(make_regression_data(32), 8), val)
        assert sampler.epochs == [0, 1]
        trainer.validate(Regressor(), val)
    assert sampler.epochs == [0, 1, 2]


def test_predict_warns_once_when_predict_step_returns_none(tmp_path):
    class Forgetful(Regressor):
        def predict_step(self, batch, batch_idx):
            return None if batch_idx % 2 else self(batch[0])

    trainer = Trainer(default_root_dir=tmp_path, logger=False, enable_checkpointing=False, enable_progress_bar=False)
    with pytest.warns(UserWarning, match=r"Forgetful.predict_step returned None for 2 batch\(es\)") as caught:
        outputs = trainer.predict(Forgetful(), make_loader(make_regression_data(32), 8))
    assert [o is None for o in outputs] == [False, True, False, True]
    assert sum("returned None" in str(w.message) for w in caught) == 1


@pytest.mark.parametrize("mode, seen", [
    ("min_size", [{"a": 0, "b": 5}, {"a": 1, "b": 6}]),
    ("max_size", [{"a": 0, "b": 5}, {"a": 1, "b": 6}, {"a": 2, "b": None}]),
])
def test_a_list_of_plain_values_in_a_combined_loader_is_one_iterable(tmp_path, mode, seen):
    from stoker.trainer.iterables import CombinedLoader

    combined = CombinedLoader({"a": [0, 1, 2], "b": (5, 6)}, mode)
    assert combined.flattened == [[0, 1, 2], (5, 6)]
    got = []

    class Reader(Regressor):
        def validation_step(self, batch, batch_idx):
            got.append(batch)

    trainer = Trainer(default_root_dir=tmp_path, barebones=True)
    trainer.validate(Reader(), combined)
    assert got == seen


def test_lightning_arguments_stoker_does_not_take_are_fine_at_their_inert_values(tmp_path):
    trainer = Trainer(default_root_dir=tmp_path, logger=False, plugins=None, sync_batchnorm=False,
                      enable_autolog_hparams=True, model_registry=None)
    assert not hasattr(trainer, "plugins")
    for argument in ({"plugins": ["an environment"]}, {"enable_autolog_hparams": False},
                     {"model_registry": "my-model"}):  # (sync_batchnorm=True is taken now: test_sync_batchnorm.py)
        (name, _), = argument.items()
        with pytest.raises(TypeError, match=rf"Trainer\({name}=\.\.\.\) is a Lightning argument stoker does not take"):
            Trainer(default_root_dir=tmp_path, **argument)


def test_callbacks_without_a_state_may_share_a_state_key(tmp_path):
    from stoker import Callback

    class Note(Callback):
        def on_train_start(self, trainer, module):
            pass

    class Kept(Callback):
        def state_dict(self):
            return {"n": 1}

    trainer = Trainer(default_root_dir=tmp_path, logger=False, callbacks=[Note(), Note()])
    assert sum(isinstance(c, Note) for c in trainer.callbacks) == 2
    with pytest.raises(ValueError, match=r"several callbacks with state_key \['\S*Kept'\] and a state of their own"):
        Trainer(default_root_dir=tmp_path, logger=False, callbacks=[Kept(), Kept()])


def test_foreign_loggers_come_after_all_the_loggers_all_names(tmp_path):
    from stoker.loggers import available_loggers

    recorder = RecordingLogger()
    trainer = Trainer(default_root_dir=tmp_path, logger=[recorder, "all"])
    assert len(trainer.loggers) == len(available_loggers()) + 1 and trainer.loggers[-1] is recorder


def test_a_logger_subclass_that_answers_its_own_version_keeps_it(tmp_path):
    from stoker.loggers import Logger

    class Fixed(Logger):
        @property
        def name(self):
            return "fixed"

        @property
        def version(self):
            return "v1"

    fixed = Fixed(tmp_path)
    assert fixed.version_chosen
    trainer = Trainer(default_root_dir=tmp_path, max_epochs=1, logger=[fixed, "csv"], log_every_n_steps=1,
                      enable_progress_bar=False, enable_model_summary=False)
    trainer.fit(Regressor(), *_data())
    assert trainer.log_dir == os.path.join(str(tmp_path), "fixed", "v1")
    assert trainer.loggers[1].version == 0  # the csv logger counted its own folders


def test_num_sanity_val_steps_minus_one_reads_as_infinity(tmp_path):
    assert Trainer(default_root_dir=tmp_path, logger=False, num_sanity_val_steps=-1).num_sanity_val_steps == float("inf")
    assert Trainer(default_root_dir=tmp_path, logger=False, num_sanity_val_steps=3).num_sanity_val_steps == 3


@pytest.mark.parametrize("fn", ["validate", "test", "predict"])
def test_an_evaluation_without_any_module_is_a_type_error_and_a_value_error(tmp_path, fn):
    trainer = Trainer(default_root_dir=tmp_path, logger=False)
    for kind in (TypeError, ValueError):
        with pytest.raises(kind, match=rf"Trainer.{fn}\(\) needs a module: pass it, or call fit first"):
            getattr(trainer, fn)()


def test_the_entry_points_take_lightnings_weights_only(tmp_path):
    trainer = Trainer(default_root_dir=tmp_path, logger=False, max_epochs=1, enable_progress_bar=False,
                      enable_model_summary=False, enable_checkpointing=False)
    module, (train, val) = Regressor(), _data()
    trainer.fit(module, train, val, weights_only=None)
    assert trainer.validate(module, val, weights_only=True) and trainer.test(module, val, weights_only=False)
    inputs = torch.utils.data.DataLoader(torch.randn(8, 8), batch_size=4)
    assert len(trainer.predict(module, inputs, weights_only=None)) == 2
    with pytest.raises(TypeError, match=r"Trainer\.validate\(weights_only='yes'\) must be True, False or None"):
        trainer.validate(module, val, weights_only="yes")
