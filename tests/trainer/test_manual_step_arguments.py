"""Manual optimization's ``optimizer.step(closure, **kwargs)``: the keyword arguments reach the optimizer's own
``step``, and so does a closure (whose first call returns what the step's closure already computed, and whose later
calls evaluate it again: LBFGS) except under fp16 loss scaling, whose scaler steps without one."""

from __future__ import annotations

from typing import Any

import pytest
import torch
import torch.nn.functional as F

from stoker import TrainingModule
from tests.helpers.models import batches, clone_model, lbfgs_loop, make_loader, make_mlp, make_regression_data
from tests.helpers.trainers import quiet_trainer
from tests.helpers.weights import params_of


class Noting(torch.optim.SGD):
    """SGD whose step takes a keyword of its own and records what it was given."""

    def __init__(self, params: Any, lr: float) -> None:
        super().__init__(params, lr=lr)
        self.calls: list[tuple[Any, Any]] = []  # (note, what the handed closure returned, or "none")

    def step(self, closure: Any = None, *, note: Any = None) -> Any:  # type: ignore[override]
        self.calls.append((note, "none" if closure is None else closure()))
        return super().step()


class Manual(TrainingModule):
    automatic_optimization = False

    def __init__(self, make_optimizer: Any) -> None:
        super().__init__()
        self.net = make_mlp(seed=0)
        self.make_optimizer = make_optimizer
        self.closure_runs = 0
        self.losses: list[torch.Tensor] = []

    def training_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        opt = self.optimizers()

        def closure() -> torch.Tensor:
            self.closure_runs += 1
            opt.zero_grad()
            loss = F.mse_loss(self.net(x), y)
            self.manual_backward(loss)
            self.losses.append(loss)
            return loss

        if isinstance(opt.optimizer.optimizer, Noting):
            returned = opt.step(closure=closure, note=f"batch {batch_idx}")
            assert returned is self.losses[-1]
        else:
            opt.step(closure)

    def configure_optimizers(self) -> Any:
        return self.make_optimizer(self.net.parameters())


def test_keyword_arguments_and_the_closure_reach_the_optimizers_step() -> None:
    data = make_regression_data(n=32)
    module = Manual(lambda params: Noting(params, lr=0.05))
    reference = clone_model(module.net)
    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(module, make_loader(data, batch_size=8))
    calls = module.optimizers().optimizer.optimizer.calls
    assert [note for note, _ in calls] == [f"batch {i}" for i in range(4)]
    # the handed closure's first call gives the loss just computed: the user's closure ran once per step
    assert [got for _, got in calls] == module.losses and module.closure_runs == 4
    assert trainer.global_step == 4
    plain = torch.optim.SGD(reference.parameters(), lr=0.05)
    for x, y in batches(data, 8):
        plain.zero_grad()
        F.mse_loss(reference(x), y).backward()
        plain.step()
    for got, want in zip(params_of(module.net), params_of(reference)):
        assert torch.equal(got, want)


def test_under_fp16_the_keywords_go_through_the_scaler_without_the_closure() -> None:
    module = Manual(lambda params: Noting(params, lr=0.05))
    trainer = quiet_trainer(max_epochs=1, precision="fp16")
    trainer.fit(module, make_loader(make_regression_data(n=32), batch_size=8))
    calls = module.optimizers().optimizer.optimizer.calls
    # a step the scaler skips for overflow never reaches the optimizer
    assert calls == [(f"batch {i}", "none") for i in range(4)][4 - len(calls):]
    assert len(calls) == trainer.global_step and module.closure_runs == 4


def test_lbfgs_evaluates_the_closure_again_as_a_plain_loop_does() -> None:
    data = make_regression_data(n=32)
    module = Manual(lambda params: torch.optim.LBFGS(params, lr=0.5, max_iter=4))
    reference = clone_model(module.net)
    quiet_trainer(max_epochs=2).fit(module, make_loader(data, batch_size=8))
    evaluations = lbfgs_loop(reference, batches(data, 8), epochs=2)
    for got, want in zip(params_of(module.net), params_of(reference)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert module.closure_runs == evaluations > 8


class StepsWithout(Manual):
    """Steps with keyword arguments only (after its own backward), or with a closure that is not callable."""

    def __init__(self, closure: Any = None) -> None:
        super().__init__(lambda params: Noting(params, lr=0.05))
        self.closure = closure

    def training_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.manual_backward(F.mse_loss(self.net(x), y))
        self.optimizers().step(self.closure, note=batch_idx)


def test_keywords_without_a_closure_reach_the_step_alone() -> None:
    module = StepsWithout()
    quiet_trainer(max_steps=2).fit(module, make_loader(make_regression_data(n=16)))
    assert module.optimizers().optimizer.optimizer.calls == [(0, "none"), (1, "none")]


def test_a_closure_that_is_not_callable_is_refused() -> None:
    with pytest.raises(TypeError, match="needs a callable closure, got str"):
        quiet_trainer(max_steps=1).fit(StepsWithout("loss"), make_loader(make_regression_data(n=8)))
