"""Every error the Trainer promises: what happened, the bad value, and how to fix it."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from stoker import Trainer, TrainingModule
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.trainers import quiet_trainer as bare


def loader(n: int = 16) -> DataLoader:
    return make_loader(make_regression_data(n=n), batch_size=8)


class Returns(Regressor):
    def __init__(self, value: Any) -> None:
        super().__init__()
        self.value = value

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss = super().training_step(batch, batch_idx)
        return self.value(loss) if callable(self.value) else self.value


@pytest.mark.parametrize("value, match", [
    (None, r"training_step returned NoneType \(None\); it must return the loss"),
    (lambda loss: loss.repeat(3), r"training_step returned a loss of shape \(3,\); it must be a scalar"),
    (lambda loss: {"los": loss}, r"training_step returned a dict without a 'loss' key \(keys: \['los'\]\)"),
    (lambda loss: {"loss": loss.item()}, "training_step returned float"),
])
def test_training_step_must_return_a_scalar_loss(value: Any, match: str) -> None:
    with pytest.raises(TypeError, match=match):
        bare(max_steps=1).fit(Returns(value), loader())


class NoOptimizers(TrainingModule):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return torch.zeros((), requires_grad=True)


class Configured(Regressor):
    def __init__(self, value: Any) -> None:
        super().__init__()
        self.value = value

    def configure_optimizers(self) -> Any:
        return self.value(self) if callable(self.value) else self.value


def sgd(m: torch.nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(m.parameters(), lr=0.1)


def step_lr(opt: torch.optim.Optimizer) -> Any:
    return torch.optim.lr_scheduler.StepLR(opt, 1)


def test_configure_optimizers_missing() -> None:
    with pytest.raises(TypeError, match=r"NoOptimizers does not define configure_optimizers\(\)"):
        bare().fit(NoOptimizers(), loader())


@pytest.mark.parametrize("value, error, match", [
    (None, TypeError, r"configure_optimizers\(\) returned None. Return an optimizer"),
    ("adam", TypeError, r"configure_optimizers\(\) returned 'adam'"),
    (lambda m: [sgd(m), "x"], TypeError, r"returned \[SGD, 'x'\]: the scheduler str is not a torch LR scheduler"),
    (lambda m: [sgd(m), sgd(m), "x"], TypeError, "str is not a torch.optim.Optimizer"),
    (lambda m: {"lr_scheduler": None}, TypeError, "without an 'optimizer' key"),
    (lambda m: {"optimizer": sgd(m), "lr_schedular": None}, ValueError, "Did you mean 'lr_scheduler'"),
    (lambda m: (sgd(m), 3), TypeError, "the scheduler int is not a torch LR scheduler"),
    (lambda m: {"optimizer": (o := sgd(m)), "lr_scheduler": {"scheduler": step_lr(o), "interval": "batch"}},
     ValueError, "interval='batch' is not an interval"),
    (lambda m: {"optimizer": (o := sgd(m)), "lr_scheduler": {"scheduler": step_lr(o), "frequency": 0}},
     ValueError, "frequency=0 must be an int >= 1"),
    (lambda m: (o := sgd(m), torch.optim.lr_scheduler.ReduceLROnPlateau(o)), ValueError,
     "ReduceLROnPlateau scheduler needs a metric to watch"),
])
def test_configure_optimizers_returning_something_else(value: Any, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        bare().fit(Configured(value), loader())


def test_a_return_of_the_wrong_kind_is_caught_as_a_value_error_too() -> None:
    # TypeError by stoker's rule; `except MisconfigurationException` (ValueError) in a Lightning script catches it
    with pytest.raises(ValueError, match=r"configure_optimizers\(\) returned 'adam'"):
        bare().fit(Configured("adam"), loader())


def test_plateau_monitor_that_was_never_logged() -> None:
    def plateau(m: torch.nn.Module) -> Any:
        opt = sgd(m)
        sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "monitor": "val/acc"}}

    with pytest.raises(RuntimeError, match=r"ReduceLROnPlateau conditioned on metric val/acc which is not available. "
                                           r"Available metrics are: \['train/loss'\]. \(ReduceLROnPlateau watches "
                                           r"'val/acc', which was not logged"):
        bare().fit(Configured(plateau), loader())


class Empty(IterableDataset):
    def __iter__(self) -> Any:
        return iter([])


def test_empty_train_loader() -> None:
    with pytest.raises(ValueError, match=r"The train loader has no batches \(it is empty\)"):
        bare().fit(Regressor(), DataLoader(TensorDataset(torch.zeros(0, 8), torch.zeros(0, 2)), batch_size=4))
    with pytest.raises(ValueError, match="The train loader yielded no batches in epoch 0"):
        bare(max_epochs=1).fit(Regressor(), DataLoader(Empty(), batch_size=4))


def test_loader_without_length_needs_max_steps_or_max_epochs() -> None:
    with pytest.raises(ValueError, match="has no length .* neither max_epochs nor max_steps is set"):
        bare().fit(Regressor(), DataLoader(Empty(), batch_size=4))


@pytest.mark.parametrize("kwargs, error, match", [
    ({"accumulate": 0}, ValueError, r"Trainer\(accumulate=0\) must be an int >= 1"),
    ({"accumulate": 1.5}, ValueError, r"Trainer\(accumulate=1.5\) must be an int >= 1"),
    ({"precision": "fp17"}, ValueError, r"Trainer\(precision='fp17'\) is not a precision. Expected one of"),
    ({"max_epochs": -3}, ValueError, r"Trainer\(max_epochs=-3\) must be None \(or -1\) or an int >= 0"),
    ({"max_steps": "10"}, ValueError, r"Trainer\(max_steps='10'\)"),
    ({"clip_grad_norm": 0}, ValueError, r"Trainer\(clip_grad_norm=0\) must be None \(no clipping\)"),
    ({"clip_grad_norm": (1, 2)}, TypeError, r"Trainer\(clip_grad_norm=\(1, 2\)\) must be .* not a tuple"),
    ({"clip_grad_norm": 1.0, "clip_grad_value": 1.0}, ValueError, "choose one way of clipping"),
    ({"val_check_interval": 1.5}, ValueError, r"val_check_interval=1.5\) must be a float in \(0.0, 1.0\]"),
    ({"check_val_every_n_epoch": 0}, ValueError, r"check_val_every_n_epoch=0\)"),
    ({"check_val_every_n_epoch": None}, ValueError, "needs an int val_check_interval"),
    ({"limit_train_batches": 1.5}, ValueError, r"limit_train_batches=1.5\) must be None"),
    ({"limit_val_batches": -1}, ValueError, r"limit_val_batches=-1\) must be >= 0"),
    ({"log_every_n_steps": 0}, ValueError, r"log_every_n_steps=0\) must be an int >= 1"),
    ({"seed": "42"}, TypeError, r"Trainer\(seed='42'\) must be None or an int"),
    ({"accelerator": "tpu"}, ValueError, r"Trainer\(accelerator='tpu'\) is not an accelerator"),
    ({"devices": 0}, ValueError, r"Trainer\(devices=0\) is not a device count"),
    ({"logger": 3}, TypeError, r"Trainer\(logger=3\): expected True, False, a logger name .* int is none"),
    ({"logger": "nope"}, ValueError, r"logger='nope' is not a supported logger. Expected one of: 'tensorboard'"),
])
def test_bad_trainer_arguments(kwargs: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        Trainer(**kwargs)


def test_bad_fit_inputs() -> None:
    with pytest.raises(TypeError, match="expects a stoker.TrainingModule, got Linear"):
        bare().fit(torch.nn.Linear(2, 2), loader())
    with pytest.raises(TypeError, match="Loader #0 is a Tensor; the Trainer needs torch.utils.data.DataLoader"):
        bare().fit(Regressor(), [torch.zeros(2, 8)])
    with pytest.raises(ValueError, match="exactly one train loader"):
        bare().fit(Regressor())
    with pytest.raises(ValueError, match=r"val_check_interval=5\) is more than the 2 training batches"):
        bare(val_check_interval=5).fit(Regressor(), loader(), loader())
    with pytest.raises(ValueError, match="needs a module: pass it, or call fit first"):
        bare().validate(dataloaders=loader())
    with pytest.raises(ValueError, match=r"No dataloaders: pass dataloaders=... or define Regressor.test_dataloader"):
        bare().test(Regressor())


def test_save_checkpoint_before_any_run() -> None:
    with pytest.raises(RuntimeError, match="needs a module"):
        bare().save_checkpoint("x")
    with pytest.raises(AttributeError, match="needs a module"):  # the class Lightning raises, for renamed scripts
        bare().save_checkpoint("x")
