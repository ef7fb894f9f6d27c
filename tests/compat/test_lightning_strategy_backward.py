"""``module.manual_backward`` goes through ``trainer.strategy.backward``, as in Lightning: a script or test that
patches ``Strategy.backward`` sees every manual backward, and the backward hooks still run around the module's
``backward``."""

from __future__ import annotations

from typing import Any
from unittest import mock

import pytest
import torch

from stoker.strategies import Strategy
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.trainers import quiet_trainer


class TwoBackwards(Regressor):
    automatic_optimization = False

    def __init__(self) -> None:
        super().__init__()
        self.calls: list[str] = []

    def training_step(self, batch: Any, batch_idx: int) -> None:
        opt = self.optimizers()
        x, y = batch
        for _ in range(2):  # two backward passes into one step
            self.manual_backward(torch.nn.functional.mse_loss(self(x), y) / 2)
        opt.step()
        opt.zero_grad()

    def on_before_backward(self, loss: torch.Tensor) -> None:
        self.calls.append("before")

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        self.calls.append("backward")
        super().backward(loss, *args, **kwargs)

    def on_after_backward(self) -> None:
        self.calls.append("after")


def test_manual_backward_runs_through_strategy_backward(tmp_path: Any) -> None:
    trainer = quiet_trainer(max_epochs=1, default_root_dir=tmp_path)
    module = TwoBackwards()
    # taken before the fit, as Lightning's own tests take it: it sees the module the fit attaches
    with mock.patch.object(Strategy, "backward", wraps=trainer.strategy.backward) as backward:
        trainer.fit(module, make_loader(make_regression_data(n=32), batch_size=8))
    assert backward.call_count == 4 * 2 and trainer.global_step == 4
    assert all(call.args[1] is None for call in backward.call_args_list)  # Lightning's optimizer argument
    assert module.calls == ["before", "backward", "after"] * 8


def test_strategy_backward_outside_a_run_says_so() -> None:
    with pytest.raises(RuntimeError, match="no module is attached"):
        quiet_trainer().strategy.backward(torch.ones(1, requires_grad=True), None)
