"""Optimizers that evaluate the loss again inside their step (LBFGS) under automatic optimization: stepped with a
closure that reruns ``training_step`` and backward on the same batch, as a plain PyTorch loop does."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from tests.helpers.models import Regressor, batches, clone_model, lbfgs_loop, make_loader, make_regression_data
from tests.helpers.trainers import quiet_trainer
from tests.helpers.weights import params_of


class Lbfgs(Regressor):
    def __init__(self) -> None:
        super().__init__()
        self.steps_seen = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.steps_seen += 1
        return super().training_step(batch, batch_idx)

    def configure_optimizers(self) -> Any:
        return torch.optim.LBFGS(self.parameters(), lr=0.5, max_iter=4)


def test_lbfgs_trains_as_a_plain_closure_loop() -> None:
    data = make_regression_data(n=32)
    module = Lbfgs()
    reference = clone_model(module.net)
    quiet_trainer(max_epochs=2).fit(module, make_loader(data, batch_size=8))

    evaluations = lbfgs_loop(reference, batches(data, 8), epochs=2)
    for got, want in zip(params_of(module.net), params_of(reference)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert module.steps_seen == evaluations > 8  # each step evaluated the loss several times, as the plain loop


@pytest.mark.parametrize("kwargs, match", [
    ({"accumulate": 2}, "cannot accumulate gradients"),
    ({"precision": "fp16"}, "fp16's loss scaling cannot follow"),
])
def test_a_closure_optimizer_refuses_what_it_cannot_follow(kwargs: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        quiet_trainer(max_steps=2, **kwargs).fit(Lbfgs(), make_loader(make_regression_data(n=16)))
