"""How the Trainer treats what ``configure_optimizers`` returns around its schedulers: a scheduler built on an
optimizer that was not returned, a
``ReduceLROnPlateau`` whose metric is missing, the scheduler a module's ``lr_scheduler_step`` gets, and the
``LRSchedulerConfig`` record under Lightning's import path."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from stoker.trainer.optim import LRSchedulerConfig as TrainerRecord
from stoker.utilities.types import LRSchedulerConfig
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.trainers import quiet_trainer
from tests.helpers.weights import params_of


class Configured(Regressor):
    def __init__(self, make: Any) -> None:
        super().__init__()
        self.make = make

    def configure_optimizers(self) -> Any:
        return self.make(self)


def loader() -> Any:
    return make_loader(make_regression_data(n=32), batch_size=8)


def test_a_scheduler_built_on_an_optimizer_that_was_not_returned_is_refused() -> None:
    def make(m: torch.nn.Module) -> Any:
        stepped, other = (torch.optim.SGD(m.parameters(), lr=0.1) for _ in range(2))
        return [stepped], [torch.optim.lr_scheduler.StepLR(other, step_size=1)]

    with pytest.raises(ValueError, match=r"scheduler StepLR built on a SGD that is not one of the optimizers it "
                                         r"returned"):
        quiet_trainer(max_steps=1).fit(Configured(make), loader())


def plateau(strict: bool) -> Any:
    def make(m: torch.nn.Module) -> Any:
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        m.plateau = torch.optim.lr_scheduler.ReduceLROnPlateau(opt)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": m.plateau, "monitor": "never", "strict": strict}}

    return make


def test_a_strict_plateau_without_its_metric_raises_an_error_of_both_classes() -> None:
    # RuntimeError by stoker's rule; a Lightning script's `except MisconfigurationException` (ValueError) too
    for error in (RuntimeError, ValueError):
        with pytest.raises(error, match=r"ReduceLROnPlateau watches 'never', which was not logged"):
            quiet_trainer(max_epochs=1).fit(Configured(plateau(True)), loader())


def test_a_lenient_plateau_without_its_metric_warns_and_is_not_stepped() -> None:
    module = Configured(plateau(False))
    with pytest.warns(RuntimeWarning, match=r"'never' not logged .*not stepped \(strict=False\)"):
        quiet_trainer(max_epochs=2).fit(module, loader())
    assert module.plateau.last_epoch == 0


class OwnStep(Configured):
    """Steps its schedulers in lr_scheduler_step by their class, as a Lightning module may."""

    def __init__(self) -> None:
        super().__init__(self.schedulers)
        self.received: list[Any] = []

    def schedulers(self, m: torch.nn.Module) -> Any:
        opt = torch.optim.SGD(self.parameters(), lr=0.1)
        self.per_step = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        self.per_epoch = torch.optim.lr_scheduler.ExponentialLR(opt, gamma=0.9)
        return [opt], [{"scheduler": self.per_step, "interval": "step"}, self.per_epoch]

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        self.received.append(scheduler)
        if isinstance(scheduler, torch.optim.lr_scheduler.StepLR):
            scheduler.step()


def test_lr_scheduler_step_gets_the_scheduler_configure_optimizers_returned() -> None:
    module = OwnStep()
    quiet_trainer(max_epochs=2).fit(module, loader())
    assert [s is module.per_step for s in module.received] == [True] * 4 + [False] + [True] * 4 + [False]
    assert module.received[4] is module.per_epoch
    assert module.per_step.last_epoch == 8 and module.per_epoch.last_epoch == 0  # this hook left it alone


def test_the_scheduler_record_is_lightnings_dataclass_under_its_path() -> None:
    def make(m: torch.nn.Module) -> Any:
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.ReduceLROnPlateau(opt),
                "monitor": "train/loss"}

    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(Configured(make), loader())
    config = trainer.lr_scheduler_configs[0]
    assert LRSchedulerConfig is TrainerRecord
    assert config == LRSchedulerConfig(scheduler=config.scheduler, monitor="train/loss", interval="epoch",
                                       frequency=1, reduce_on_plateau=True, strict=True, name=None)
    assert config != LRSchedulerConfig(scheduler=config.scheduler, monitor="train/loss", reduce_on_plateau=False)
    assert LRSchedulerConfig(config.scheduler).reduce_on_plateau  # read from the scheduler when not given
