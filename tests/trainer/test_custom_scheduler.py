"""A scheduler that is not torch's, under automatic optimization: accepted when the module steps it in its own
``lr_scheduler_step`` (Lightning's rule), and its state travels with the Trainer's checkpoint."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.trainers import quiet_trainer
from tests.helpers.weights import params_of


class Halving:
    """Halves every group's rate when stepped; counts its steps (its whole state)."""

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer, self.steps = optimizer, 0

    def step(self, epoch: int) -> None:
        self.steps += 1
        for group in self.optimizer.param_groups:
            group["lr"] *= 0.5

    def state_dict(self) -> dict[str, int]:
        return {"steps": self.steps}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.steps = state["steps"]


class OwnScheduler(Regressor):
    def configure_optimizers(self) -> Any:
        optimizer = torch.optim.SGD(self.parameters(), lr=0.08)
        self.halving = Halving(optimizer)
        return [optimizer], [self.halving]

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        scheduler.step(epoch=self.current_epoch)


def _fit(module: Regressor, epochs: int, root: Any = None, ckpt_path: str | None = None) -> Any:
    trainer = quiet_trainer(max_epochs=epochs, **({"default_root_dir": str(root), "enable_checkpointing": True}
                                                  if root is not None else {}))
    trainer.fit(module, make_loader(make_regression_data(n=32), batch_size=8), ckpt_path=ckpt_path)
    return trainer


def test_the_modules_lr_scheduler_step_steps_it_each_epoch(tmp_path: Any) -> None:
    module = OwnScheduler()
    trainer = _fit(module, 3)
    assert module.halving.steps == 3 and trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(0.01)


def test_its_state_resumes_with_the_run(tmp_path: Any) -> None:
    straight = OwnScheduler()
    _fit(straight, 3)
    _fit(OwnScheduler(), 2, tmp_path)
    resumed = OwnScheduler()
    _fit(resumed, 3, tmp_path, ckpt_path="last")
    assert resumed.halving.steps == 3  # 2 from the checkpoint, 1 after it
    for got, want in zip(params_of(resumed), params_of(straight)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_without_the_hook_it_is_refused() -> None:
    class NoHook(OwnScheduler):
        lr_scheduler_step = Regressor.lr_scheduler_step

    with pytest.raises(TypeError, match="needs the module's own lr_scheduler_step"):
        _fit(NoHook(), 1)
