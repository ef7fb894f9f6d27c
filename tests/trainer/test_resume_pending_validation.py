"""A checkpoint saved by a batch's end hooks (``ModelCheckpoint(every_n_train_steps=...)``) comes before the
validation due after that batch: a fit resumed from it runs that validation first, so callbacks that watch
validations (``EarlyStopping``) and the validation schedule end as in the fit never interrupted."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch

from stoker import EarlyStopping, ModelCheckpoint
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.trainers import quiet_trainer


class Counted(Regressor):
    def __init__(self) -> None:
        super().__init__()
        self.validated_at: list[int] = []

    def on_validation_end(self) -> None:
        self.validated_at.append(self.trainer.global_step)


def run(root: str, schedule: dict, ckpt_path: str | None = None) -> tuple[Any, Counted, EarlyStopping]:
    torch.manual_seed(0)
    module, stop = Counted(), EarlyStopping(monitor="val/loss", patience=2, min_delta=10.0)  # stops on patience
    trainer = quiet_trainer(default_root_dir=root, max_epochs=4, enable_checkpointing=True, **schedule,
                            callbacks=[stop, ModelCheckpoint(dirpath=os.path.join(root, "ck"), filename="{step}",
                                                             monitor=None, save_top_k=-1, every_n_train_steps=3)])
    data = make_regression_data(n=40)
    trainer.fit(module, make_loader(data, batch_size=4), make_loader(data, batch_size=8), ckpt_path=ckpt_path)
    trainer.accelerator.wait_for_checkpoints()
    return trainer, module, stop


@pytest.mark.parametrize(("schedule", "steps"), [
    ({"val_check_interval": 3}, (3, 6)),  # validations due at the checkpointed batches; the stop comes at step 9
    ({"val_check_interval": 7, "check_val_every_n_epoch": None}, (12, 21)),  # counted across epochs; stop at 21
])
def test_a_fit_resumed_from_a_batch_end_checkpoint_runs_the_validation_due_there(tmp_path, schedule, steps):
    whole, whole_module, whole_stop = run(str(tmp_path / "whole"), schedule)
    assert whole_stop.stopped_epoch >= 0
    for step in steps:
        resumed, module, stop = run(str(tmp_path / f"resumed{step}"), schedule,
                                    ckpt_path=str(tmp_path / "whole" / "ck" / f"step={step}.ckpt"))
        assert resumed.global_step == whole.global_step
        assert [s for s in whole_module.validated_at if s >= step] == module.validated_at
        assert (stop.wait_count, stop.stopped_epoch, stop.best_score) == \
            (whole_stop.wait_count, whole_stop.stopped_epoch, whole_stop.best_score)
        for a, b in zip(whole_module.parameters(), module.parameters()):
            assert torch.equal(a, b)
