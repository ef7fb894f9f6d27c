"""A ``ReduceLROnPlateau`` of interval "step" steps after the batch's validation, not with the optimizer: at a batch
where validation runs it watches the value that validation logged (Lightning's order)."""

from __future__ import annotations

from typing import Any

import torch

from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.trainers import quiet_trainer


class Watched(Regressor):
    def __init__(self) -> None:
        super().__init__()
        self.watched: list[tuple[int, float]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.log("watched", float(batch_idx))
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.log("watched", 100.0)

    def configure_optimizers(self) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.01)
        plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": plateau, "interval": "step", "monitor": "watched"}}

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        self.watched.append((self.trainer.global_step, metric))
        scheduler.step(metric)


def test_a_step_plateau_scheduler_watches_the_validation_of_its_batch():
    module = Watched()
    trainer = quiet_trainer(max_epochs=1, val_check_interval=2, limit_val_batches=1)
    trainer.fit(module, make_loader(make_regression_data(n=32), 8), make_loader(make_regression_data(n=8), 8))
    # validations after batches 1 and 3 (the epoch's end): the scheduler of those steps sees their 100.0
    assert module.watched == [(1, 0.0), (2, 100.0), (3, 2.0), (4, 100.0)]
