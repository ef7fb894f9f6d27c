"""Manual optimization: a two-optimizer GAN-style module steps itself; global_step counts every applied step."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from stoker import Callback, Trainer, TrainingModule
from tests.helpers.models import batches, make_loader, make_mlp, make_regression_data
from tests.helpers.weights import assert_same_weights, params_of

BATCH = 8


class TwoPlayer(TrainingModule):
    """A GAN-shaped module: a 'critic' and a 'generator', each with its own optimizer and loss."""

    def __init__(self, lr: float = 0.05, every: int = 1, clip: tuple[float, str] | None = None,
                 scheduler: bool = False) -> None:
        super().__init__()
        self.save_hyperparameters()
        self.automatic_optimization = False
        self.generator = make_mlp(seed=1)
        self.critic = make_mlp(in_features=2, out_features=1, seed=2)
        self.seen: list[Any] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        opt_c, opt_g = self.optimizers()
        every = self.hparams.every
        with self.toggled_optimizer(opt_c):
            self.seen.append({n: p.requires_grad for n, p in self.named_parameters()})
            c_loss = critic_loss(self.critic, self.generator, x, y)
            self.manual_backward(c_loss)
            if (batch_idx + 1) % every == 0:
                if self.hparams.clip is not None:
                    self.clip_gradients(opt_c, *self.hparams.clip)
                opt_c.step()
                opt_c.zero_grad()
        self.toggle_optimizer(opt_g)
        g_loss = generator_loss(self.critic, self.generator, x)
        self.manual_backward(g_loss)
        if (batch_idx + 1) % every == 0:
            opt_g.step()
            opt_g.zero_grad()
        self.untoggle_optimizer(opt_g)
        self.log("c_loss", c_loss)
        return g_loss

    def configure_optimizers(self) -> Any:
        opt_c = torch.optim.SGD(self.critic.parameters(), lr=self.hparams.lr)
        opt_g = torch.optim.Adam(self.generator.parameters(), lr=self.hparams.lr / 10)
        if not self.hparams.scheduler:
            return [opt_c, opt_g]
        return [opt_c, opt_g], [torch.optim.lr_scheduler.StepLR(opt_c, step_size=1, gamma=0.5)]


def critic_loss(critic: nn.Module, generator: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return F.softplus(-critic(y)).mean() + F.softplus(critic(generator(x).detach())).mean()


def generator_loss(critic: nn.Module, generator: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return F.softplus(-critic(generator(x))).mean()


def raw_two_player(data: Any, epochs: int, every: int = 1, lr: float = 0.05, clip: Any = None) -> TwoPlayer:
    """The same training as a plain PyTorch loop (no Trainer)."""
    module = TwoPlayer(lr=lr)
    opt_c = torch.optim.SGD(module.critic.parameters(), lr=lr)
    opt_g = torch.optim.Adam(module.generator.parameters(), lr=lr / 10)
    for _ in range(epochs):
        for i, (x, y) in enumerate(batches(data, BATCH)):
            module.generator.requires_grad_(False)
            critic_loss(module.critic, module.generator, x, y).backward()
            module.generator.requires_grad_(True)
            if (i + 1) % every == 0:
                if clip is not None:
                    params = list(module.critic.parameters())
                    if clip[1] == "norm":
                        torch.nn.utils.clip_grad_norm_(params, clip[0])
                    else:
                        torch.nn.utils.clip_grad_value_(params, clip[0])
                opt_c.step()
                opt_c.zero_grad()
            module.critic.requires_grad_(False)
            generator_loss(module.critic, module.generator, x).backward()
            module.critic.requires_grad_(True)
            if (i + 1) % every == 0:
                opt_g.step()
                opt_g.zero_grad()
    return module


def fit(module: TrainingModule, data: Any, **kwargs: Any) -> Trainer:
    kwargs.setdefault("max_epochs", 2)
    trainer = Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False, **kwargs)
    trainer.fit(module, make_loader(data, batch_size=BATCH))
    return trainer


def test_two_optimizers_count_every_step_and_match_a_plain_loop(tmp_path: Any) -> None:
    data = make_regression_data(n=64)
    module = TwoPlayer()
    trainer = fit(module, data, default_root_dir=tmp_path)
    assert trainer.global_step == module.global_step == 2 * 8 * 2  # two optimizer steps per batch (Lightning)
    assert_same_weights(module, raw_two_player(data, epochs=2))
    # toggle_optimizer: only the critic's parameters required grad in its block, and the flags came back.
    assert all(v for n, v in module.seen[0].items() if n.startswith("critic"))
    assert not any(v for n, v in module.seen[0].items() if n.startswith("generator"))
    assert all(p.requires_grad for p in module.parameters())
    assert "c_loss" in trainer.callback_metrics


def test_max_steps_counts_manual_steps(tmp_path: Any) -> None:
    trainer = fit(TwoPlayer(), make_regression_data(n=64), max_epochs=None, max_steps=6, default_root_dir=tmp_path)
    assert trainer.global_step == 6 and trainer.fit_loop.batches_done == 3


def test_user_accumulation_steps_every_n_batches(tmp_path: Any) -> None:
    data = make_regression_data(n=64)
    module = TwoPlayer(every=2)
    trainer = fit(module, data, default_root_dir=tmp_path)
    assert trainer.global_step == 2 * 4 * 2
    assert_same_weights(module, raw_two_player(data, epochs=2, every=2))


@pytest.mark.parametrize("clip", [(0.01, "norm"), (0.001, "value")])
def test_clip_gradients_clips_that_optimizer(tmp_path: Any, clip: tuple[float, str]) -> None:
    data = make_regression_data(n=32)
    module = TwoPlayer(clip=clip)
    fit(module, data, max_epochs=1, default_root_dir=tmp_path)
    expected = raw_two_player(data, epochs=1, clip=clip)
    assert_same_weights(module, expected)
    assert not all(torch.equal(p, q) for p, q in zip(module.parameters(), raw_two_player(data, epochs=1).parameters()))


def test_clip_gradients_rejects_bad_arguments(tmp_path: Any) -> None:
    with pytest.raises(ValueError, match="gradient_clip_algorithm='l2'"):
        fit(TwoPlayer(clip=(1.0, "l2")), make_regression_data(n=16), max_epochs=1, default_root_dir=tmp_path)


def test_schedulers_are_not_stepped_for_the_user(tmp_path: Any) -> None:
    class Stepping(TwoPlayer):
        def on_train_epoch_end(self) -> None:
            self.lrs = self.lr_schedulers()

    module = Stepping(scheduler=True)
    trainer = fit(module, make_regression_data(n=16), default_root_dir=tmp_path)
    # the user's own scheduler, as in Lightning (the Trainer's configs hold it as configure_optimizers returned it)
    assert module.lrs is trainer.lr_scheduler_configs[0].scheduler
    assert type(module.lrs).__module__ == "torch.optim.lr_scheduler"
    assert module.lrs.get_last_lr() == [0.05]  # two epochs, never stepped by the Trainer


@pytest.mark.parametrize("argument", [{"accumulate": 2}, {"clip_grad_norm": 1.0}, {"clip_grad_value": 1.0},
                                      {"on_nonfinite_loss": "skip"}])
def test_trainer_settings_for_automatic_optimization_raise(tmp_path: Any, argument: dict) -> None:
    name = next(iter(argument))
    with pytest.raises(ValueError, match=name):
        fit(TwoPlayer(), make_regression_data(n=16), default_root_dir=tmp_path, **argument)


def test_several_optimizers_under_automatic_optimization_point_to_manual(tmp_path: Any) -> None:
    module = TwoPlayer()
    module.automatic_optimization = True
    with pytest.raises(ValueError, match="automatic_optimization = False"):
        fit(module, make_regression_data(n=16), default_root_dir=tmp_path)


def test_hooks_around_manual_steps(tmp_path: Any) -> None:
    calls: list[str] = []

    class Hooks(Callback):
        def on_before_backward(self, trainer: Any, module: Any, loss: Any) -> None:
            calls.append("before_backward")

        def on_after_backward(self, trainer: Any, module: Any) -> None:
            calls.append("after_backward")

        def on_before_optimizer_step(self, trainer: Any, module: Any, optimizer: Any) -> None:
            calls.append("before_step")
            assert any(p.grad is not None for g in optimizer.param_groups for p in g["params"])

        def on_before_zero_grad(self, trainer: Any, module: Any, optimizer: Any) -> None:
            calls.append("zero_grad")

    fit(TwoPlayer(), make_regression_data(n=8), max_epochs=1, callbacks=[Hooks()], default_root_dir=tmp_path)
    assert calls == ["before_backward", "after_backward", "before_step"] * 2  # no on_before_zero_grad (Lightning)


def test_single_optimizer_is_returned_alone_and_fp16_steps(tmp_path: Any) -> None:
    class One(TrainingModule):
        automatic_optimization = False

        def __init__(self) -> None:
            super().__init__()
            self.net = make_mlp(seed=0)

        def training_step(self, batch: Any, batch_idx: int) -> None:
            opt = self.optimizers()
            assert not isinstance(opt, list) and isinstance(opt.optimizer, torch.optim.Optimizer)
            x, y = batch
            opt.zero_grad()
            self.manual_backward(F.mse_loss(self.net(x), y))
            opt.step()
            self.skipped += opt.optimizer.step_was_skipped

        def configure_optimizers(self) -> Any:
            return torch.optim.SGD(self.parameters(), lr=0.05)

    module = One()
    module.skipped = 0
    before = params_of(module)
    trainer = fit(module, make_regression_data(n=32), max_epochs=1, precision="fp16", default_root_dir=tmp_path)
    assert module.skipped < 4 and trainer.global_step == 4 - module.skipped  # an fp16 overflow skip is no step
    assert all(torch.isfinite(p).all() for p in module.parameters())
    assert not all(torch.equal(a, b) for a, b in zip(before, module.parameters()))


def test_training_step_return_type_is_checked(tmp_path: Any) -> None:
    class Bad(TwoPlayer):
        def training_step(self, batch: Any, batch_idx: int) -> Any:
            super().training_step(batch, batch_idx)
            return 1.5

    with pytest.raises(TypeError, match="manual optimization"):
        fit(Bad(), make_regression_data(n=8), max_epochs=1, default_root_dir=tmp_path)


def test_two_steps_after_one_backward_count_twice(tmp_path: Any) -> None:
    class Joint(TwoPlayer):
        def training_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            opt_c, opt_g = self.optimizers()
            loss = critic_loss(self.critic, self.generator, x, y) + generator_loss(self.critic, self.generator, x)
            self.manual_backward(loss)
            for opt in (opt_c, opt_g):
                opt.step()
                opt.zero_grad()

    trainer = fit(Joint(), make_regression_data(n=32), max_epochs=1, default_root_dir=tmp_path)
    assert trainer.global_step == 8  # every optimizer.step() is a step, as in Lightning


def test_resume_continues_the_manual_step_count_and_weights(tmp_path: Any) -> None:
    data = make_regression_data(n=32)
    whole = TwoPlayer()
    fit(whole, data, default_root_dir=tmp_path / "whole")
    first = Trainer(max_epochs=1, logger=False, enable_progress_bar=False, default_root_dir=tmp_path / "split")
    first.fit(TwoPlayer(), make_loader(data, batch_size=BATCH))
    resumed = TwoPlayer()
    second = Trainer(max_epochs=2, logger=False, enable_progress_bar=False, default_root_dir=tmp_path / "split")
    second.fit(resumed, make_loader(data, batch_size=BATCH), ckpt_path="last")
    assert first.global_step == 8 and second.global_step == 16
    assert_same_weights(resumed, whole)
