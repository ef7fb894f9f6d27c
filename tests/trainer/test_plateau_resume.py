"""A ``ReduceLROnPlateau`` of interval "step" steps with the optimizer, so a checkpoint saved at a mid-epoch
validation's end holds that step, and a fit resumed from it ends exactly as one never interrupted."""

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
