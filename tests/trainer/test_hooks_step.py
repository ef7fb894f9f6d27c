"""The module's optimizer-step hooks: their order inside a batch, what each receives, that the defaults train
exactly as the Trainer's own path, and when epoch schedulers step."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from stoker import Callback, Trainer
from tests.helpers.models import Regressor, make_loader, make_regression_data


def quiet(**kwargs: Any) -> Trainer:
    kwargs.setdefault("max_epochs", 1)
    return Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, **kwargs)


class Recording(Regressor):
    """Every step hook records its name and arguments, then does the default."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.calls: list[Any] = []

    def optimizer_zero_grad(self, epoch: int, batch_idx: int, optimizer: Any) -> None:
        self.calls.append(("optimizer_zero_grad", epoch, batch_idx))
        super().optimizer_zero_grad(epoch, batch_idx, optimizer)

    def backward(self, loss: torch.Tensor, *args: Any, **kwargs: Any) -> None:
        self.calls.append(("backward",))
        super().backward(loss, *args, **kwargs)

    def configure_gradient_clipping(self, optimizer: Any, gradient_clip_val: Any = None,
                                    gradient_clip_algorithm: Any = None) -> None:
        self.calls.append(("clip", gradient_clip_val, gradient_clip_algorithm))
        super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)

    def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
        self.calls.append(("optimizer_step", epoch, batch_idx, float(optimizer_closure())))
        super().optimizer_step(epoch, batch_idx, optimizer, optimizer_closure)

    def lr_scheduler_step(self, scheduler: Any, metric: Any) -> None:
        self.calls.append(("lr_scheduler_step", metric))
        super().lr_scheduler_step(scheduler, metric)

    def on_train_batch_end(self, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.calls.append(("on_train_batch_end", batch_idx))

    def on_validation_start(self) -> None:
        self.calls.append(("on_validation_start",))


def names(calls: list[Any]) -> list[str]:
    return [c[0] for c in calls]


def test_the_step_hooks_run_in_order_with_their_arguments() -> None:
    module = Recording(scheduler="epoch")  # StepLR per epoch: steps at the epoch's last batch
    data = make_regression_data(n=16)
    quiet(gradient_clip_val=0.5, num_sanity_val_steps=0).fit(module, make_loader(data), make_loader(data))
    batch = ["optimizer_zero_grad", "backward", "clip", "optimizer_step"]
    assert names(module.calls) == [*batch, "on_train_batch_end", *batch, "lr_scheduler_step", "on_train_batch_end",
                                   "on_validation_start"]
    assert module.calls[0] == ("optimizer_zero_grad", 0, 0) and module.calls[2] == ("clip", 0.5, "norm")
    assert module.calls[3][:3] == ("optimizer_step", 0, 0) and module.calls[3][3] > 0  # the closure gives the loss
    assert module.calls[9] == ("lr_scheduler_step", None)


def test_with_accumulation_the_gradients_are_cleared_once_per_window() -> None:
    module = Recording()
    quiet(accumulate=2).fit(module, make_loader(make_regression_data(n=32)))  # 4 batches, 2 windows
    assert [c[1:] for c in module.calls if c[0] == "optimizer_zero_grad"] == [(0, 0), (0, 2)]
    assert [c[2] for c in module.calls if c[0] == "optimizer_step"] == [1, 3]


def weights_after(module: Regressor, **kwargs: Any) -> list[torch.Tensor]:
    data = make_regression_data(n=48)
    quiet(max_epochs=2, **kwargs).fit(module, make_loader(data), make_loader(data))
    return [p.detach().clone() for p in module.parameters()]


@pytest.mark.parametrize("kwargs", [{}, {"accumulate": 2, "gradient_clip_val": 0.1}])
def test_the_defaults_train_exactly_as_the_trainers_own_path(kwargs: dict[str, Any]) -> None:
    plain = weights_after(Regressor(scheduler="epoch"), **kwargs)
    hooked = weights_after(Recording(scheduler="epoch"), **kwargs)
    for a, b in zip(plain, hooked):
        assert torch.equal(a, b)


def test_optimizer_step_may_change_the_learning_rate_before_stepping() -> None:
    class WarmUp(Regressor):
        def optimizer_step(self, epoch: int, batch_idx: int, optimizer: Any, optimizer_closure: Any = None) -> None:
            for group in optimizer.param_groups:
                group["lr"] = 0.0 if self.trainer.global_step < 2 else 0.05
            optimizer.step(closure=optimizer_closure)

    module = WarmUp()
    before = [p.detach().clone() for p in module.parameters()]
    quiet(max_steps=2).fit(module, make_loader(make_regression_data(n=32)))
    assert all(torch.equal(a, b.detach()) for a, b in zip(before, module.parameters()))  # lr 0: nothing moved


def test_a_plateau_scheduler_gets_its_metric_after_the_epochs_validation() -> None:
    module = Recording(scheduler="plateau", interval="epoch")
    data = make_regression_data(n=16)
    quiet().fit(module, make_loader(data), make_loader(data))
    steps = [c for c in module.calls if c[0] == "lr_scheduler_step"]
    assert len(steps) == 1 and isinstance(steps[0][1], float)
    assert names(module.calls).index("lr_scheduler_step") > names(module.calls).index("on_validation_start")


def test_an_epoch_scheduler_has_stepped_when_the_epochs_validation_runs() -> None:
    seen: list[float] = []

    class Reads(Callback):
        def on_validation_start(self, trainer: Any, module: Any) -> None:
            seen.append(trainer.optimizers[0].param_groups[0]["lr"])

    data = make_regression_data(n=16)
    quiet(callbacks=[Reads()], num_sanity_val_steps=0).fit(Regressor(lr=0.1, scheduler="epoch"), make_loader(data),
                                                         make_loader(data))
    assert seen and seen[0] < 0.1


def test_manual_backward_goes_through_the_backward_hook() -> None:
    class Manual(Recording):
        automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            opt = self.optimizers()
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(self(batch[0]), batch[1])
            self.manual_backward(loss)
            opt.step()
            return loss

    module = Manual()
    quiet().fit(module, make_loader(make_regression_data(n=16)))
    assert names(module.calls) == ["backward", "on_train_batch_end"] * 2


class ClipsItself(Regressor):
    """configure_gradient_clipping overridden to call clip_gradients with its own arguments."""

    def __init__(self, **clip: Any) -> None:
        super().__init__()
        self.clip = clip

    def configure_gradient_clipping(self, optimizer: Any, gradient_clip_val: Any = None,
                                    gradient_clip_algorithm: Any = None) -> None:
        self.clip_gradients(optimizer, **self.clip)


def test_clip_gradients_takes_the_trainers_setting_for_what_it_leaves_out() -> None:
    by_trainer = weights_after(Regressor(), gradient_clip_val=0.05, gradient_clip_algorithm="value")
    for clip, trainer_clip in (({}, {"gradient_clip_algorithm": "value"}),  # nothing given: all the Trainer's
                               ({"gradient_clip_algorithm": "value"}, {})):  # the Trainer's value, by element
        got = weights_after(ClipsItself(**clip), gradient_clip_val=0.05, **trainer_clip)
        assert all(torch.equal(a, b) for a, b in zip(by_trainer, got))


@pytest.mark.parametrize("clip, trainer_clip, quoted", [
    ({"gradient_clip_val": 0.5}, {"gradient_clip_val": 0.1}, "clip_gradients(gradient_clip_val=0.5)"),
    ({"gradient_clip_algorithm": "Norm"}, {"gradient_clip_val": 0.1, "gradient_clip_algorithm": "value"},
     "clip_gradients(gradient_clip_algorithm='Norm')"),
])
def test_clip_gradients_contradicting_the_trainer_is_an_error(clip: dict, trainer_clip: dict, quoted: str) -> None:
    with pytest.raises(ValueError, match="contradicts the Trainer's clipping") as error:
        weights_after(ClipsItself(**clip), **trainer_clip)
    assert str(error.value).startswith(quoted)
    weights_after(ClipsItself(gradient_clip_val=0.1), gradient_clip_val=0.1)  # the same value twice is no conflict
