"""A ``ReduceLROnPlateau`` of interval "step" steps, as in Lightning, after the validation due at its batch (the
epoch's last batch: after the epoch's validation, before ``on_train_epoch_end``), so it may watch a value of that
validation. A checkpoint saved in between holds the step still waiting, and a fit resumed from it ends exactly as
one never interrupted."""

from __future__ import annotations

import os
from typing import Any

import torch

from stoker import ModelCheckpoint
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.trainers import quiet_trainer


class Flat(Regressor):
    """Validation logs a value that never improves, so the plateau halves the rate every other step."""

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("val_flat", 1.0)

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, patience=1, factor=0.5)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": plateau, "interval": "step", "monitor": "val_flat",
                                                   "strict": False}}


def run(root: Any, ckpt_path: str | None = None) -> tuple[Any, Any]:
    torch.manual_seed(0)
    module = Flat()
    trainer = quiet_trainer(default_root_dir=root, max_epochs=1, val_check_interval=2, enable_checkpointing=True,
                            callbacks=[ModelCheckpoint(dirpath=os.path.join(root, "ck"), filename="{step}",
                                                       monitor=None, save_top_k=-1)])
    data = make_regression_data(n=32)
    trainer.fit(module, make_loader(data, batch_size=4), make_loader(data, batch_size=4), ckpt_path=ckpt_path)
    trainer.accelerator.wait_for_checkpoints()
    return trainer, module


def test_a_fit_resumed_from_a_mid_epoch_validation_checkpoint_ends_as_the_uninterrupted_one(tmp_path):
    whole, whole_module = run(str(tmp_path / "whole"))
    resumed, resumed_module = run(str(tmp_path / "resumed"), ckpt_path=str(tmp_path / "whole" / "ck" / "step=4.ckpt"))
    assert whole.optimizers[0].param_groups[0]["lr"] < 0.1  # the plateau did act
    assert resumed.optimizers[0].param_groups[0]["lr"] == whole.optimizers[0].param_groups[0]["lr"]
    for a, b in zip(whole_module.parameters(), resumed_module.parameters()):
        assert torch.equal(a, b)


class Counted(Regressor):
    """Validation logs how many validations ran; the scheduler step records what it was given, and when."""

    def __init__(self, frequency: int) -> None:
        super().__init__()
        self.frequency, self.validations, self.seen = frequency, 0, []

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        pass

    def on_validation_epoch_end(self) -> None:
        self.validations += 1
        self.log("val_count", float(self.validations))

    def on_train_epoch_end(self) -> None:
        self.seen.append("epoch_end")

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": plateau, "interval": "step", "monitor": "val_count",
                                                   "frequency": self.frequency}}

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        self.seen.append((self.trainer.global_step, metric))
        scheduler.step(metric)


def test_a_step_plateau_watching_a_validation_value_steps_after_that_validation(tmp_path):
    """Lightning's common set-up, the scheduler's frequency equal to the validation interval: each step sees the
    validation of its own batch (before, the first step came before any validation: 'val_count' not available)."""
    module = Counted(frequency=2)
    data = make_regression_data(n=32)
    trainer = quiet_trainer(default_root_dir=str(tmp_path), max_epochs=2, val_check_interval=2, num_sanity_val_steps=0)
    trainer.fit(module, make_loader(data, batch_size=4), make_loader(data, batch_size=16))
    steps = [(2, 1.0), (4, 2.0), (6, 3.0), (8, 4.0), "epoch_end", (10, 5.0), (12, 6.0), (14, 7.0), (16, 8.0),
             "epoch_end"]
    assert module.seen == steps


def test_the_last_batch_step_waits_for_the_epoch_end_validation(tmp_path):
    module = Counted(frequency=8)  # once per epoch of 8 batches, validated at the epoch's end
    data = make_regression_data(n=32)
    trainer = quiet_trainer(default_root_dir=str(tmp_path), max_epochs=2, num_sanity_val_steps=0)
    trainer.fit(module, make_loader(data, batch_size=4), make_loader(data, batch_size=16))
    assert module.seen == [(8, 1.0), "epoch_end", (16, 2.0), "epoch_end"]


def test_a_fit_resumed_from_an_epoch_end_validation_checkpoint_ends_as_the_uninterrupted_one(tmp_path):
    """The checkpoint of the epoch's last validation is saved before the last batch's plateau step: it waits in the
    loop's position and runs on resume, before the epoch's end hooks."""

    def fit(root: str, ckpt_path: str | None = None) -> tuple[Any, Counted]:
        torch.manual_seed(0)
        module = Counted(frequency=8)
        trainer = quiet_trainer(default_root_dir=root, max_epochs=2, enable_checkpointing=True, num_sanity_val_steps=0,
                                callbacks=[ModelCheckpoint(dirpath=os.path.join(root, "ck"), filename="{step}",
                                                           monitor=None, save_top_k=-1,
                                                           save_on_train_epoch_end=False)])  # at validation's end
        data = make_regression_data(n=32)
        trainer.fit(module, make_loader(data, batch_size=4), make_loader(data, batch_size=16), ckpt_path=ckpt_path)
        trainer.accelerator.wait_for_checkpoints()
        return trainer, module

    whole, _ = fit(str(tmp_path / "whole"))
    resumed, module = fit(str(tmp_path / "resumed"), ckpt_path=str(tmp_path / "whole" / "ck" / "step=8.ckpt"))
    assert module.seen[:2] == [(8, 1.0), "epoch_end"]  # the waiting step ran first, with the saved value
    assert resumed.lr_scheduler_configs[0].scheduler.state_dict() == whole.lr_scheduler_configs[0].scheduler.state_dict()
    for a, b in zip(whole.model.parameters(), resumed.model.parameters()):
        assert torch.equal(a, b)


class EpochPlateau(Counted):
    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": plateau, "monitor": "val_count"}}


def test_a_resume_into_an_epochs_end_steps_its_plateau_through_the_modules_lr_scheduler_step(tmp_path):
    """Resumed at an epoch's end (no batch run yet in that fit), the epoch's plateau still goes through the module's
    own ``lr_scheduler_step``."""
    data = make_regression_data(n=32)
    first = quiet_trainer(default_root_dir=str(tmp_path), max_epochs=1, num_sanity_val_steps=0,
                          enable_checkpointing=True,
                          callbacks=[ModelCheckpoint(dirpath=str(tmp_path / "ck"), filename="{step}", monitor=None,
                                                     save_on_train_epoch_end=False)])
    first.fit(EpochPlateau(frequency=1), make_loader(data, batch_size=4), make_loader(data, batch_size=16))
    first.accelerator.wait_for_checkpoints()
    module = EpochPlateau(frequency=1)
    module.validations = 1  # what the first fit had counted when it saved
    resumed = quiet_trainer(default_root_dir=str(tmp_path), max_epochs=1, num_sanity_val_steps=0)
    resumed.fit(module, make_loader(data, batch_size=4), make_loader(data, batch_size=16),
                ckpt_path=str(tmp_path / "ck" / "step=8.ckpt"))
    assert module.seen == ["epoch_end", (8, 1.0)]
