"""A Trainer's run edges as a Lightning script meets them: a fit with nothing left to train, the step axis of each
evaluation loader's per-step values, and ``num_val_batches`` outside a validate run."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader

from stoker import Callback, ModelCheckpoint, TrainingModule
from tests.helpers.trackers_readback import ListLogger
from tests.helpers.trainers import quiet_trainer

RUN_HOOKS = ("on_fit_start", "on_sanity_check_start", "on_sanity_check_end", "on_train_start", "on_train_epoch_start",
             "on_validation_start", "on_train_end", "on_fit_end")


def items(n: int, base: int = 0) -> DataLoader:
    return DataLoader([torch.tensor([float(base + i)]) for i in range(n)], batch_size=2)


class Calls(Callback):
    """Records the run hooks by name."""

    def __init__(self) -> None:
        self.names: list[str] = []


def _recorder(name: str) -> Any:
    def hook(self: Calls, *args: Any, **kwargs: Any) -> None:
        self.names.append(name)
    return hook


for _name in RUN_HOOKS:
    setattr(Calls, _name, _recorder(_name))


class Small(TrainingModule):
    """Logs a value per validation/test batch when ``on_step``; records which loader hooks it was asked by."""

    def __init__(self, val_loaders: int = 1, on_step: bool = False) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.val_loaders, self.on_step = val_loaders, on_step
        self.asked: list[str] = []

    def forward(self, batch: torch.Tensor) -> torch.Tensor:
        return self.layer(batch)

    def loss(self, batch: torch.Tensor) -> torch.Tensor:
        return self.layer(batch / 100).pow(2).mean()

    def training_step(self, batch: torch.Tensor, batch_idx: int) -> torch.Tensor:
        return self.loss(batch)

    def validation_step(self, batch: torch.Tensor, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.log("v", self.loss(batch), on_step=self.on_step, on_epoch=True)

    def test_step(self, batch: torch.Tensor, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.log("t", self.loss(batch), on_step=self.on_step, on_epoch=True)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.1)

    def train_dataloader(self) -> DataLoader:
        self.asked.append("train")
        return items(6)

    def _eval(self, name: str) -> Any:
        self.asked.append(name)
        if self.val_loaders == 1:
            return items(4, 1000)
        return [items(4 + 2 * i, 1000 * (i + 1)) for i in range(self.val_loaders)]

    def val_dataloader(self) -> Any:
        return self._eval("val")

    def test_dataloader(self) -> Any:
        return self._eval("test")


class StopDuringSanityCheck(Callback):
    def on_sanity_check_end(self, trainer: Any, module: Any) -> None:
        trainer.should_stop = True


@pytest.mark.parametrize("settings", [dict(max_epochs=0), dict(max_steps=0, max_epochs=-1)])
def test_a_fit_with_no_epoch_or_step_to_run_skips_the_training_hooks(settings):
    calls, module = Calls(), Small()
    trainer = quiet_trainer(callbacks=[calls], enable_model_summary=False, num_sanity_val_steps=0, **settings)
    trainer.fit(module)
    assert calls.names == ["on_fit_start", "on_fit_end"]
    assert module.asked == ["train"]  # the train loader is still asked for; the val loaders are not
    assert trainer.global_step == 0 and trainer.num_val_batches == []


def test_a_second_fit_past_max_epochs_runs_no_training_hooks():
    calls, module = Calls(), Small()
    trainer = quiet_trainer(callbacks=[calls], enable_model_summary=False, max_epochs=1)
    trainer.fit(module)
    calls.names.clear()
    trainer.fit(module)
    assert calls.names == ["on_fit_start", "on_fit_end"]
    assert trainer.global_step == 3 and trainer.current_epoch == 1


def test_a_resume_from_the_last_epochs_checkpoint_runs_no_training_hooks(tmp_path):
    first = quiet_trainer(max_epochs=2, enable_checkpointing=True, enable_model_summary=False,
                          callbacks=[ModelCheckpoint(dirpath=tmp_path, save_last=True)])
    first.fit(Small())
    calls, module = Calls(), Small()
    trainer = quiet_trainer(callbacks=[calls], enable_model_summary=False, max_epochs=2)
    trainer.fit(module, ckpt_path=str(tmp_path / "last.ckpt"))
    assert calls.names == ["on_fit_start", "on_fit_end"]
    assert "val" not in module.asked and trainer.global_step == 6


def test_a_stop_asked_during_the_sanity_check_skips_the_training():
    calls, module = Calls(), Small()
    trainer = quiet_trainer(callbacks=[calls, StopDuringSanityCheck()], enable_model_summary=False, max_epochs=2,
                            num_sanity_val_steps=2)
    trainer.fit(module)
    assert calls.names == ["on_fit_start", "on_sanity_check_start", "on_validation_start", "on_sanity_check_end",
                           "on_fit_end"]
    assert module.asked == ["val", "train"] and trainer.global_step == 0 and trainer.num_val_batches == [2]


def test_with_min_epochs_a_stop_during_the_sanity_check_waits():
    calls = Calls()
    trainer = quiet_trainer(callbacks=[calls, StopDuringSanityCheck()], enable_model_summary=False, max_epochs=2,
                            min_epochs=1, num_sanity_val_steps=2)
    trainer.fit(Small())
    assert "on_train_start" in calls.names and trainer.global_step == 3


def steps_of(logger: ListLogger, name: str) -> list[int | None]:
    return [step for step, metrics in logger.rows if name in metrics]


def test_each_evaluation_loader_logs_its_step_values_on_its_own_axis():
    logger = ListLogger()
    trainer = quiet_trainer(logger=logger, enable_model_summary=False)
    module = Small(val_loaders=2, on_step=True)
    trainer.validate(module)
    assert steps_of(logger, "v_step/dataloader_idx_0") == [0, 1]
    assert steps_of(logger, "v_step/dataloader_idx_1") == [0, 1, 2]
    trainer.test(module)
    assert steps_of(logger, "t_step/dataloader_idx_1") == [0, 1, 2]


def test_in_a_fit_each_val_loaders_axis_continues_across_validations():
    logger = ListLogger()
    trainer = quiet_trainer(logger=logger, enable_model_summary=False, max_epochs=2)
    trainer.fit(Small(val_loaders=2, on_step=True))
    assert steps_of(logger, "v_step/dataloader_idx_0") == [0, 1, 2, 3]
    assert steps_of(logger, "v_step/dataloader_idx_1") == [0, 1, 2, 3, 4, 5]


def test_num_val_batches_outside_a_validate_run_is_the_last_fits():
    trainer = quiet_trainer(enable_model_summary=False, max_epochs=1)
    module = Small()
    trainer.validate(module)
    assert trainer.num_val_batches == [2]
    trainer.test(module)
    assert trainer.num_val_batches == [] and trainer.num_test_batches == [2]
    trainer.validate(module)
    trainer.predict(module, items(2))
    assert trainer.num_val_batches == []
    fitted = quiet_trainer(enable_model_summary=False, max_epochs=1)
    fitted.fit(Small(val_loaders=2))
    fitted.validate(module)
    assert fitted.num_val_batches == [2]
    fitted.test(module)
    assert fitted.num_val_batches == [2, 3]  # the fit's val loaders' counts again


def test_each_run_starts_its_loaders_step_axes_again():
    logger = ListLogger()
    trainer = quiet_trainer(logger=logger, enable_model_summary=False, max_epochs=1)
    module = Small(on_step=True)
    trainer.validate(module)
    trainer.validate(module)
    trainer.fit(module)
    trainer.validate(module)
    assert steps_of(logger, "v_step") == [0, 1] * 4
