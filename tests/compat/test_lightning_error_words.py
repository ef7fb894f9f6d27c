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
