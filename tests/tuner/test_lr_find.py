"""Tuner.lr_find: the sweep's rates, the smoothed losses and the divergence stop, the suggestion, the attribute it
writes, and that the trial leaves the module, the optimizer, the RNG and the Trainer exactly as they were."""

from __future__ import annotations

import math
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

from stoker import Trainer
from stoker.loggers import CSVLogger
from stoker.trainer import TrainingModule
from stoker.tuner import LRFinder, Tuner
from tests.helpers.trainers import quiet_trainer
from tests.helpers.weights import assert_same_weights, state_of


def _data(n: int = 64, shuffle: bool = False) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(n, 4, generator=g)
    y = x @ torch.tensor([[1.0], [-2.0], [0.5], [3.0]])
    return DataLoader(TensorDataset(x, y), batch_size=16, shuffle=shuffle)


class Linear(TrainingModule):
    """A linear regression; the rate lives in ``lr`` (or, with ``in_hparams``, only in ``hparams.lr``)."""

    def __init__(self, lr: float = 0.01, in_hparams: bool = False, optimizer: str = "sgd") -> None:
        super().__init__()
        if in_hparams:
            self.save_hyperparameters("lr")
        else:
            self.lr = lr
        self.kind = optimizer
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(4, 1)
        self.steps = 0

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.steps += 1
        x, y = batch
        loss = F.mse_loss(self.layer(x), y)
        self.log("loss", loss, on_step=True, on_epoch=True)
        return loss

    def configure_optimizers(self) -> Any:
        lr = self.hparams["lr"] if "lr" in self.hparams else self.lr
        if self.kind == "adam":
            return torch.optim.Adam(self.parameters(), lr=lr)
        return torch.optim.SGD(self.parameters(), lr=lr, momentum=0.9)


def test_the_sweep_runs_from_min_lr_to_max_lr_geometrically_or_evenly() -> None:
    module = Linear()
    finder = Tuner(quiet_trainer()).lr_find(module, _data(), min_lr=1e-6, max_lr=1e-2, num_training=9,
                                            early_stop_threshold=None, update_attr=False)
    lrs = finder.results["lr"]
    assert len(lrs) == len(finder.results["loss"]) == 9
    assert lrs[0] == pytest.approx(1e-6, rel=1e-12) and lrs[-1] == pytest.approx(1e-2, rel=1e-12)
    ratios = [b / a for a, b in zip(lrs, lrs[1:])]
    assert ratios == pytest.approx([10 ** 0.5] * 8, rel=1e-9)  # four decades in eight equal factors

    linear = Tuner(quiet_trainer()).lr_find(Linear(), _data(), min_lr=0.001, max_lr=0.009, num_training=5,
                                            mode="linear", early_stop_threshold=None, update_attr=False)
    assert linear.results["lr"] == pytest.approx([0.001, 0.003, 0.005, 0.007, 0.009], rel=1e-12)


def test_the_rate_of_each_step_is_the_one_recorded_and_schedulers_are_left_out() -> None:
    seen: list[float] = []

    class Watching(Linear):
        def configure_optimizers(self) -> Any:
            opt = torch.optim.SGD(self.parameters(), lr=self.lr)
            return {"optimizer": opt, "lr_scheduler": torch.optim.lr_scheduler.StepLR(opt, 1, gamma=0.0)}

        def on_before_optimizer_step(self, optimizer: Any) -> None:
            seen.append(optimizer.param_groups[0]["lr"])

    finder = Tuner(quiet_trainer()).lr_find(Watching(), _data(), num_training=6, early_stop_threshold=None,
                                            update_attr=False)
    assert seen == finder.results["lr"]


def test_weights_optimizer_step_rng_and_trainer_are_exactly_as_before() -> None:
    module = Linear()
    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(module, _data(shuffle=True))
    weights, optimizer = state_of(module), trainer.optimizers[0].state_dict()
    kept = {n: getattr(trainer, n) for n in ("callbacks", "loggers", "max_steps", "max_epochs", "optimizers",
                                              "fit_loop", "limit_val_batches", "options", "state")}
    loop, step, rng = trainer.fit_loop.state_dict(), trainer.global_step, torch.get_rng_state()

    Tuner(trainer).lr_find(module, _data(shuffle=True), num_training=20, update_attr=False)

    assert_same_weights(module, weights, "after lr_find")
    torch.testing.assert_close(trainer.optimizers[0].state_dict(), optimizer, rtol=0, atol=0)
    assert {n: getattr(trainer, n) for n in kept} == kept and all(getattr(trainer, n) is v for n, v in kept.items())
    assert trainer.fit_loop.state_dict() == loop and trainer.global_step == step == 4
    assert torch.equal(torch.get_rng_state(), rng)
    assert all(p.grad is None for p in module.parameters())


def test_a_fit_after_lr_find_trains_and_logs_exactly_as_a_fit_without_it(tmp_path: Path) -> None:
    def train(tune: bool, tmp: Path) -> tuple[dict[str, torch.Tensor], dict[str, Any], str]:
        torch.manual_seed(123)
        module = Linear(optimizer="adam")
        trainer = quiet_trainer(max_epochs=2, logger=CSVLogger(tmp), log_every_n_steps=1)
        if tune:
            Tuner(trainer).lr_find(module, _data(shuffle=True), num_training=30, update_attr=False)
        trainer.fit(module, _data(shuffle=True))
        assert trainer.global_step == 8
        return state_of(module), trainer.callback_metrics, (tmp / "stoker_logs/version_0/metrics.csv").read_text()

    tuned, plain = train(True, tmp_path / "tuned"), train(False, tmp_path / "plain")
    assert_same_weights(tuned[0], plain[0], "fit after lr_find")
    torch.testing.assert_close(tuned[1], plain[1], rtol=0, atol=0)
    assert tuned[2] == plain[2] and tuned[2].count("\n") > 8  # the same rows logged, none from the sweep


def test_the_suggestion_lies_where_the_loss_falls_fastest_below_divergence() -> None:
    # One fixed batch: the loss changes only through the rate. SGD on this problem diverges above lr ~ 0.1.
    x = torch.randn(64, 4, generator=torch.Generator().manual_seed(1))
    loader = DataLoader(TensorDataset(x, x.sum(1, keepdim=True)), batch_size=64)
    finder = Tuner(quiet_trainer()).lr_find(Linear(), loader, min_lr=1e-5, max_lr=10.0, num_training=60,
                                            update_attr=False)
    suggestion, i, losses = finder.suggestion(), finder.optimal_index, finder.results["loss"]
    assert finder.results["lr"][i] == suggestion
    assert 1e-4 < suggestion < 0.1  # well above min_lr, below where the loss stops falling
    assert losses[i + 5] < losses[i] < losses[i - 5]  # on the falling part of the curve
    assert len(losses) < 60  # the loss blew up before max_lr: the sweep stopped


def test_divergence_stops_the_sweep_at_the_threshold() -> None:
    finder = Tuner(quiet_trainer()).lr_find(Linear(), _data(), min_lr=1e-3, max_lr=1e3, num_training=50,
                                            early_stop_threshold=4.0, update_attr=False)
    losses = finder.results["loss"]
    assert 2 < len(losses) < 50
    assert not math.isfinite(losses[-1]) or losses[-1] > 4.0 * min(losses[:-1])
    assert all(loss <= 4.0 * min(losses[: i + 1]) for i, loss in enumerate(losses[:-1]))


def test_accumulation_sets_one_rate_per_optimizer_step() -> None:
    module = Linear()
    finder = Tuner(quiet_trainer(accumulate=2)).lr_find(module, _data(), num_training=10,
                                                        early_stop_threshold=None, update_attr=False)
    assert len(finder.results["lr"]) == len(finder.results["loss"]) == 10 and module.steps == 20


@pytest.mark.parametrize("in_hparams", [False, True])
def test_update_attr_writes_the_suggestion_to_lr(in_hparams: bool) -> None:
    module = Linear(lr=0.5, in_hparams=in_hparams)
    finder = Tuner(quiet_trainer()).lr_find(module, _data(), num_training=30)
    written = module.hparams["lr"] if in_hparams else module.lr
    assert written == finder.suggestion() != 0.5


def test_attr_name_and_a_missing_attribute() -> None:
    module = Linear()
    module.my_rate = 0.5
    finder = Tuner(quiet_trainer()).lr_find(module, _data(), num_training=30, attr_name="my_rate")
    assert module.my_rate == finder.suggestion() and module.lr == 0.01
    with pytest.raises(AttributeError, match="'nope'"):
        Tuner(quiet_trainer()).lr_find(module, _data(), attr_name="nope")
    del module.lr
    with pytest.raises(AttributeError, match="'lr' or 'learning_rate'"):
        Tuner(quiet_trainer()).lr_find(module, _data())
    assert module.steps == 30  # both errors came before any trial


def test_too_few_points_give_no_suggestion_and_leave_the_attribute() -> None:
    module = Linear(lr=0.123)
    finder = Tuner(quiet_trainer()).lr_find(module, _data(), num_training=5)
    assert finder.suggestion() is None and module.lr == 0.123


def test_suggestion_skips_and_ignores_non_finite_losses() -> None:
    finder = LRFinder("exponential", 1e-4, 1.0, 8)
    finder.results = {"lr": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0],
                      "loss": [5.0, 4.9, 4.0, math.nan, 1.0, 0.9, math.inf, 0.8]}
    assert finder.suggestion(skip_begin=0, skip_end=0) == 3.0  # slopes with spacing by rate; 4.0 is skipped
    assert finder.suggestion(skip_begin=5, skip_end=0) in (6.0, 8.0)
    assert finder.suggestion(skip_begin=6, skip_end=1) is None
    with pytest.raises(ValueError, match="'cubic'"):
        LRFinder("cubic", 1e-4, 1.0, 8)


def test_plot_draws_loss_over_rate() -> None:
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    finder = LRFinder("exponential", 1e-4, 1.0, 15)
    finder.results = {"lr": finder.rates(), "loss": [1.0] * 11 + [0.9, 0.5, 0.4, 2.0]}
    figure = finder.plot(suggest=True)
    ax = figure.axes[0]
    assert ax.get_xscale() == "log" and len(ax.lines) == 2  # the curve and the suggestion's marker


def test_several_optimizers_and_method_other_than_fit_are_refused() -> None:
    class Two(Linear):
        def __init__(self) -> None:
            super().__init__()
            self.automatic_optimization = False

        def training_step(self, batch: Any, batch_idx: int) -> None:
            return None

        def configure_optimizers(self) -> Any:
            return [torch.optim.SGD(self.parameters(), lr=0.1), torch.optim.SGD(self.parameters(), lr=0.1)]

    module = Two()
    weights = state_of(module)
    with pytest.raises(ValueError, match="returned 2"):
        Tuner(quiet_trainer()).lr_find(module, _data())
    assert_same_weights(module, weights)
    with pytest.raises(ValueError, match="method='validate'"):
        Tuner(quiet_trainer()).lr_find(Linear(), method="validate")


def test_fast_dev_run_skips_both_tuners_with_a_warning() -> None:
    trainer = Trainer(fast_dev_run=True, enable_progress_bar=False)
    module = Linear()
    module.batch_size = 4
    with pytest.warns(UserWarning, match="Skipping learning rate finder since `fast_dev_run` is enabled"):
        assert Tuner(trainer).lr_find(module, _data()) is None
    with pytest.warns(UserWarning, match="Skipping batch size scaler since `fast_dev_run` is enabled"):
        assert Tuner(trainer).scale_batch_size(module) is None
    assert module.steps == 0 and module.lr == 0.01 and module.batch_size == 4


def test_a_sweep_that_meets_a_nan_stops_quietly_on_a_raising_trainer() -> None:
    class Nan(Linear):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            return loss * math.nan if self.steps > 3 else loss

    trainer = quiet_trainer()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        finder = Tuner(trainer).lr_find(Nan(), _data(), num_training=20, update_attr=False)
    assert len(finder.results["loss"]) == 4 and math.isnan(finder.results["loss"][-1])
    assert trainer.on_nonfinite_loss == "raise" and trainer.nonfinite.mode == "raise"


def test_learning_rate_finder_callback_sets_the_rate_the_fit_trains_with() -> None:
    from stoker.callbacks import LearningRateFinder
    from stoker.callbacks.lr_finder import LearningRateFinder as by_lightnings_path

    finder = by_lightnings_path(num_training_steps=30)
    module, trainer = Linear(lr=0.5), quiet_trainer(max_epochs=1, callbacks=[finder])
    trainer.fit(module, _data(shuffle=True))
    assert LearningRateFinder is by_lightnings_path
    suggestion = finder.optimal_lr.suggestion()
    assert module.lr == suggestion == trainer.optimizers[0].param_groups[0]["lr"] != 0.5
    assert trainer.global_step == 4 and module.steps == 30 + 4  # the sweep's steps, then the fit's own
    with pytest.raises(ValueError, match="already configured with a `LearningRateFinder`"):
        Tuner(trainer).lr_find(module)
