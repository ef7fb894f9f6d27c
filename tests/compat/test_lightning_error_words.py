"""Errors about Trainer settings begin with Lightning's sentence, then say in stoker's words what to do: a test
ported from Lightning (``pytest.raises(..., match="passed invalid value")``) matches them, and the user still reads
which value was wrong and how to fix it."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

from stoker import Trainer
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.trainers import quiet_trainer


@pytest.mark.parametrize("kwargs, lightning, ours", [
    ({"limit_train_batches": -0.1}, "You have passed invalid value -0.1 for limit_train_batches, it has to be in "
                                    "[0.0, 1.0] or an int.", "Trainer(limit_train_batches=-0.1) must be None"),
    ({"limit_test_batches": 1.2}, "You have passed invalid value 1.2 for limit_test_batches", "fraction"),
    ({"limit_val_batches": -3}, "You have passed invalid value -3 for limit_val_batches", "must be >= 0"),
    ({"val_check_interval": 1.2}, "You have passed invalid value 1.2 for val_check_interval", "(0.0, 1.0]"),
    ({"fast_dev_run": -1}, "fast_dev_run=-1 is not a valid configuration. It should be >= 0.", "int >= 0"),
])
def test_a_bad_setting_is_named_in_lightnings_words_then_ours(kwargs: dict[str, Any], lightning: str, ours: str):
    with pytest.raises(ValueError) as caught:
        Trainer(**kwargs)
    message = str(caught.value)
    assert message.startswith(lightning) and ours in message


class Stream(IterableDataset):
    def __iter__(self):
        return iter(make_regression_data(n=16))


def test_a_fraction_of_a_loader_without_length_and_an_interval_past_the_epoch():
    with pytest.raises(ValueError) as caught:
        quiet_trainer(limit_train_batches=0.5, max_steps=2).fit(Regressor(), DataLoader(Stream(), batch_size=4))
    assert str(caught.value).startswith("When using an `IterableDataset`, `Trainer(limit_train_batches)` must be "
                                        "`1.0` or an int. An int specifies `num_train_batches` to use.")
    assert "give an int number of batches instead" in str(caught.value)
    with pytest.raises(ValueError) as caught:
        quiet_trainer(val_check_interval=5).fit(Regressor(), make_loader(make_regression_data(n=16), 8),
                                                make_loader(make_regression_data(n=16), 8))
    assert str(caught.value).startswith("`val_check_interval` (5) must be less than or equal to the number of the "
                                        "training batches (2)")
    assert "check_val_every_n_epoch=None" in str(caught.value)


def test_the_tuners_refusals_begin_with_lightnings_sentence():
    from stoker.tuner import Tuner

    tuner, module = Tuner(quiet_trainer()), Regressor()
    loader = make_loader(make_regression_data(n=16), 8)
    with pytest.raises(ValueError, match=r"^`mode` should be either of \('power', 'binsearch'\): scale_batch_size"):
        tuner.scale_batch_size(module, mode="linear")
    with pytest.raises(ValueError, match=r"^`mode` should be either of \('exponential', 'linear'\): lr_find"):
        tuner.lr_find(module, loader, mode="power")
    with pytest.raises(ValueError, match=r"^The Batch size finder cannot be used with dataloaders passed directly to "
                                         r"`\.fit\(\)`: .* Move them into train_dataloader"):
        tuner.scale_batch_size(module, train_dataloaders=loader)


@pytest.mark.parametrize("kwargs, lightning", [
    ({"max_epochs": -100}, "`max_epochs` must be a non-negative integer or -1. You passed in -100."),
    ({"max_steps": -2}, "`max_steps` must be a non-negative integer or -1 (infinite steps). You passed in -2."),
    ({"reload_dataloaders_every_n_epochs": -1}, "`reload_dataloaders_every_n_epochs` should be an int >= 0, got -1."),
])
def test_limits_and_reloads_are_refused_in_lightnings_words_then_ours(kwargs: dict[str, Any], lightning: str):
    with pytest.raises(ValueError) as caught:
        Trainer(**kwargs)
    name, value = next(iter(kwargs.items()))
    assert str(caught.value).startswith(lightning) and f"(Trainer({name}={value}) must be None" in str(caught.value)


def test_a_module_that_is_not_a_training_module_and_best_without_a_checkpoint_callback():
    with pytest.raises(TypeError, match=r"^`model` must be a `LightningModule` or `torch._dynamo.OptimizedModule`, "
                                        r"got `Linear`: Trainer expects a stoker.TrainingModule"):
        quiet_trainer().fit(torch.nn.Linear(2, 2))
    trainer = quiet_trainer(max_epochs=1, enable_checkpointing=False)
    loader = make_loader(make_regression_data(n=16), 8)
    trainer.fit(Regressor(), loader)
    with pytest.raises(ValueError, match=r'^`\.validate\(ckpt_path="best"\)` is set but `ModelCheckpoint` is not '
                                         r"configured: ckpt_path='best' needs a ModelCheckpoint callback"):
        trainer.validate(ckpt_path="best", dataloaders=loader)


def _raises(build, lightning: str, ours: str) -> None:
    with pytest.raises((ValueError, TypeError, RuntimeError, FileNotFoundError)) as caught:
        build()
    message = str(caught.value)
    assert lightning in message and ours in message, message


@pytest.mark.parametrize("build, lightning, ours", [
    (lambda: __import__("stoker").callbacks.Timer(duration="6:00:00"),
     "`Timer(duration='6:00:00')` is not a valid duration. Expected a string in the format DD:HH:MM:SS", "twelve"),
    (lambda: __import__("stoker").callbacks.Timer(interval="hour"),
     "Unsupported parameter value `Timer(interval=hour)`. Possible choices are: step, epoch", "is not an interval"),
    (lambda: __import__("stoker").callbacks.StochasticWeightAveraging(1e-2, swa_epoch_start=0),
     "swa_epoch_start should be a >0 integer or a float between 0 and 1.", "a fraction of max_epochs"),
    (lambda: __import__("stoker").callbacks.BasePredictionWriter("sometimes"),
     "`write_interval` should be one of ['batch', 'epoch', 'batch_and_epoch'].", "is not an interval"),
    (lambda: Trainer(profiler="fancy"), "When passing string value for the `profiler` parameter of `Trainer`, it "
     "can only be one of ['simple', 'advanced', 'pytorch']", "is not a profiler"),
    (lambda: Trainer(callbacks=[__import__("stoker").callbacks.TQDMProgressBar()] * 2),
     "You added multiple progress bar callbacks to the Trainer, but currently only one progress bar is supported",
     "a run draws one"),
    (lambda: Trainer(barebones=True, enable_checkpointing=True),
     "`Trainer(barebones=True, enable_checkpointing=True)` was passed", "barebones turns off"),
    (lambda: __import__("stoker").callbacks.GradientAccumulationScheduler({-1: 2}),
     "Epoch should be an int greater than or equal to 0. Got [-1].", "the key -1 is not an epoch"),
    (lambda: __import__("stoker").callbacks.GradientAccumulationScheduler({1: 0}),
     "Accumulation factor should be an int greater than 0. Got [0].", "1: 0 is not a number of micro-batches"),
    (lambda: __import__("stoker").callbacks.EarlyStopping("loss", mode="middle"),
     "`mode` can be min, max, got middle", "is not a mode"),
    (lambda: __import__("stoker").callbacks.ModelCheckpoint(monitor="loss", mode="middle"),
     "`mode` can be min, max but got middle", "is not a mode"),
    (lambda: Trainer(overfit_batches=1.5), "You have passed invalid value 1.5 for overfit_batches, it has to be in "
     "[0.0, 1.0] or an int.", "must be an int >= 0"),
    (lambda: Trainer(check_val_every_n_epoch=None, val_check_interval=0.5), "`val_check_interval` should be an "
     "integer or a time-based duration (str 'DD:HH:MM:SS', datetime.timedelta, or dict kwargs for timedelta) when "
     "`check_val_every_n_epoch=None`.", "counts val_check_interval across epochs"),
    (lambda: Trainer(enable_checkpointing=False, callbacks=[__import__("stoker").callbacks.ModelCheckpoint()]),
     "Trainer was configured with `enable_checkpointing=False` but found `ModelCheckpoint` in callbacks list",
     "drop enable_checkpointing=False"),
])
def test_constructor_refusals_begin_with_lightnings_sentence(build, lightning: str, ours: str):
    _raises(build, lightning, ours)


class Configured(Regressor):
    def __init__(self, scheduler: Any) -> None:
        super().__init__()
        self.scheduler = scheduler

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        return {"optimizer": opt, "lr_scheduler": self.scheduler(opt)}


@pytest.mark.parametrize("scheduler, lightning, ours", [
    (lambda opt: {}, 'The lr scheduler dict must have the key "scheduler" with its item being an lr scheduler',
     "needs a 'scheduler' key"),
    (lambda opt: {"scheduler": torch.optim.lr_scheduler.StepLR(opt, 1), "interval": "batch"},
     'The "interval" key in lr scheduler dict must be "step" or "epoch" but is "batch"', "is not an interval"),
    (lambda opt: torch.optim.lr_scheduler.ReduceLROnPlateau(opt), "The lr scheduler dict must include a monitor when "
     "a `ReduceLROnPlateau` scheduler is used.", "needs a metric to watch"),
    (lambda opt: torch.optim.lr_scheduler.StepLR(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=1), 1),
     "Some schedulers are attached with an optimizer that wasn't returned from `configure_optimizers`",
     "nothing would step that optimizer"),
])
def test_scheduler_refusals_begin_with_lightnings_sentence(scheduler, lightning: str, ours: str):
    loader = make_loader(make_regression_data(n=16), 8)
    _raises(lambda: quiet_trainer().fit(Configured(scheduler), loader), lightning, ours)


def test_an_unknown_configure_optimizers_shape_begins_with_lightnings_sentence():
    class Returns(Regressor):
        def configure_optimizers(self) -> Any:
            return 1

    _raises(lambda: quiet_trainer().fit(Returns(), make_loader(make_regression_data(n=16), 8)),
            "Unknown configuration for model optimizers. configure_optimizers() returned 1.", "Return an optimizer")


def test_run_refusals_begin_with_lightnings_sentence(tmp_path):
    loader = make_loader(make_regression_data(n=16), 8)

    class LogsNothing(Regressor):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            self.log("x", 1.0, on_step=False, on_epoch=False)
            return super().training_step(batch, batch_idx)

    _raises(lambda: quiet_trainer().fit(LogsNothing(), loader), "`self.log(on_step=False, on_epoch=False)` is not "
            "useful", "records nothing")

    class NeedsIndex(Regressor):
        def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int) -> Any:
            return batch

    _raises(lambda: quiet_trainer().predict(NeedsIndex(), loader), "You provided only a single `predict_dataloader`, "
            "but have included `dataloader_idx` in `NeedsIndex.predict_step()`", "has no default")
    _raises(lambda: quiet_trainer().validate(Regressor(), loader, ckpt_path=str(tmp_path / "none.ckpt")),
            f"Checkpoint file not found: {tmp_path / 'none.ckpt'}", "is not a checkpoint folder")
    from stoker.tuner import Tuner

    tuner = Tuner(quiet_trainer())
    _raises(lambda: tuner.scale_batch_size(Regressor(), method="prediction"),
            "method 'prediction' is invalid. Should be one of ('fit', 'validate', 'test', 'predict')", "")
    _raises(lambda: tuner.scale_batch_size(Regressor(), dataloaders=loader), "In tuner with method='fit', "
            "`dataloaders` argument should be None, please consider setting `train_dataloaders` and "
            "`val_dataloaders` instead", "for validate / test / predict")


def test_accumulation_and_loader_refusals_begin_with_lightnings_sentence():
    from stoker.callbacks import GradientAccumulationScheduler
    from stoker.trainer.iterables import CombinedLoader

    loader = make_loader(make_regression_data(n=16), 8)
    _raises(lambda: quiet_trainer(accumulate=2, callbacks=[GradientAccumulationScheduler({0: 2})]).fit(
        Regressor(), loader), "You have set `accumulate_grad_batches` and are using the "
        "`GradientAccumulationScheduler` callback", "both set the accumulation")

    class Manual(Regressor):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> Any:
            loss = super().training_step(batch, batch_idx)
            self.manual_backward(loss)
            self.optimizers().step()

    _raises(lambda: quiet_trainer(callbacks=[GradientAccumulationScheduler({0: 2})]).fit(Manual(), loader),
            "Automatic gradient accumulation and the `GradientAccumulationScheduler` is not supported for manual "
            "optimization", "needs automatic optimization")
    _raises(lambda: quiet_trainer().fit(Regressor(), CombinedLoader([loader, loader], "sequential")),
            '`FitLoop` does not support the `CombinedLoader(mode="sequential")` mode', "sequential is for validation")


def test_hyperparameter_refusals_begin_with_lightnings_sentence():
    from stoker import TrainingModule

    class Primitive(TrainingModule):
        def __init__(self, value: Any) -> None:
            super().__init__()
            self.save_hyperparameters(value)

    _raises(lambda: Primitive(42), "Primitives (<class 'bool'>, <class 'int'>, <class 'float'>, <class 'str'>) are "
            "not allowed.", "save_hyperparameters(42)")

    class Strict(Regressor):
        pass

    module = Strict()
    module.strict_loading = False
    _raises(lambda: module.strict_for_loading(True), "You set `.load_from_checkpoint(..., strict=True)` which is in "
            "conflict with `Strict.strict_loading=False. Please set the same value for both of them.",
            "leave strict out")


def test_a_loader_that_is_not_one_is_named_where_it_came_from_in_lightnings_words():
    loader = make_loader(make_regression_data(n=16), 8)
    _raises(lambda: quiet_trainer().fit(Regressor(), 3), "An invalid dataloader was passed to "
            "`Trainer.fit(train_dataloaders=...)`: the train loader is a int", "the Trainer needs")
    _raises(lambda: quiet_trainer().validate(Regressor(), [loader, 3]), "An invalid dataloader was passed to "
            "`Trainer.validate(dataloaders=...)`: Loader #1 is a int", "the Trainer needs")
    _raises(lambda: quiet_trainer().test(Regressor()), "An invalid dataloader was passed to "
            "`Trainer.test(dataloaders=...)`. Found None.", "define Regressor.test_dataloader()")

    class Hooks(Regressor):
        def train_dataloader(self) -> Any:
            return None

    class ValHook(Regressor):
        def val_dataloader(self) -> Any:
            return 7

    _raises(lambda: quiet_trainer().fit(Hooks()), "An invalid dataloader was returned from "
            "`Hooks.train_dataloader()`. Found None.", "needs exactly one train loader")
    _raises(lambda: quiet_trainer().validate(ValHook()), "An invalid dataloader was returned from "
            "`ValHook.val_dataloader()`: Loader #0 is a int", "the Trainer needs")


def test_module_and_run_state_refusals_begin_with_lightnings_sentence(tmp_path):
    _raises(lambda: Regressor().trainer, "Regressor is not attached to a `Trainer`", "self.trainer exists only")
    _raises(lambda: quiet_trainer().validate(), "`Trainer.validate()` requires a `LightningModule` when it hasn't "
            "been passed in a previous run", "pass it, or call fit first")
    _raises(lambda: quiet_trainer().save_checkpoint(str(tmp_path / "x")), "Saving a checkpoint is only possible if a "
            "model is attached to the Trainer", "call it during or after Trainer.fit()")
    _raises(lambda: Trainer(check_val_every_n_epoch=1.2), "`check_val_every_n_epoch` should be an integer, found 1.2.",
            "must be None or an int >= 1")
    from stoker.profilers import SimpleProfiler

    profiler = SimpleProfiler()
    profiler.start("load")
    _raises(lambda: profiler.start("load"), "Attempted to start load which has already started.",
            "already being timed")

    class Clips(Regressor):
        def configure_gradient_clipping(self, optimizer: Any, gradient_clip_val: Any = None,
                                        gradient_clip_algorithm: Any = None) -> None:
            self.clip_gradients(optimizer, gradient_clip_val=0.01)

    _raises(lambda: quiet_trainer(gradient_clip_val=0.5).fit(Clips(), make_loader(make_regression_data(n=16), 8)),
            "You have set `Trainer(gradient_clip_val=0.5)` and have passed `clip_gradients(gradient_clip_val=0.01)`. "
            "Please use only one of them.", "contradicts the Trainer's clipping")


def test_warnings_in_lightnings_words_then_ours():
    with pytest.warns(UserWarning) as caught:
        Regressor().log("loss", 1.0)  # no Trainer runs the module
    (message,) = [str(w.message) for w in caught]
    assert message.startswith("You are trying to `self.log()` but the `self.trainer` reference is not registered")
    assert "Regressor.log('loss') was called outside a Trainer run; the value is dropped" in message
