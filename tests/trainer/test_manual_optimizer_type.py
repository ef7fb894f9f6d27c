"""The optimizer ``self.optimizers()`` hands out under manual optimization is a ``torch.optim.Optimizer`` (as
Lightning's wrapper is), so a training step may check it so; its state is the wrapped optimizer's."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from stoker import Trainer, TrainingModule
from tests.helpers.models import make_loader, make_mlp, make_regression_data


class Checks(TrainingModule):
    def __init__(self) -> None:
        super().__init__()
        self.automatic_optimization = False
        self.net = make_mlp()
        self.seen: list[Any] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        opt = self.optimizers()
        assert isinstance(opt, torch.optim.Optimizer)
        x, y = batch
        loss = F.mse_loss(self.net(x), y)
        opt.zero_grad()
        self.manual_backward(loss)
        opt.step()
        inner = opt.optimizer
        # Read through the wrapper, the wrapped optimizer's own objects (nothing copied, nothing of its own).
        self.seen.append((opt.param_groups is inner.param_groups, opt.state is inner.state,
                          opt.defaults is inner.defaults, len(opt.state_dict()["state"]) == len(inner.state) > 0))
        return loss

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01, momentum=0.9)


def test_the_manual_optimizer_is_a_torch_optimizer_over_the_wrapped_state() -> None:
    module = Checks()
    trainer = Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      enable_model_summary=False)
    trainer.fit(module, make_loader(make_regression_data(16)))
    assert module.seen == [(True, True, True, True)] * 2
    opt = module.optimizers()
    momentum = {k: v["momentum_buffer"].clone() for k, v in opt.state_dict()["state"].items()}
    opt.load_state_dict(opt.state_dict())  # through the wrapper, into the wrapped optimizer
    assert all(torch.equal(opt.optimizer.state_dict()["state"][k]["momentum_buffer"], v) for k, v in momentum.items())
