"""``self.log``: torchmetrics epoch values, reductions, per-stage defaults, what reaches the loggers, hparams."""

from __future__ import annotations

import csv
import os
import re
import warnings
from typing import Any

import pytest
import torch
import torchmetrics
from torch.nn import functional as F

from stoker import Callback, CSVLogger, Trainer, TrainingModule
from tests.helpers.models import Regressor, make_loader, make_mlp, make_regression_data
from tests.helpers.trackers_readback import ListLogger
from tests.helpers.trainers import quiet_trainer as bare


class Classifier(TrainingModule):
    """Two classes from the sign of a regression target; accuracy through torchmetrics in every stage."""

    def __init__(self) -> None:
        super().__init__()
        self.net = make_mlp(out_features=2, seed=3)
        self.train_acc = torchmetrics.Accuracy(task="multiclass", num_classes=2)
        self.val_acc = torchmetrics.Accuracy(task="multiclass", num_classes=2)
        self.seen: list[tuple[torch.Tensor, torch.Tensor]] = []
        self.per_epoch: list[float] = []
        self.val_seen: list[tuple[int, int]] = []
        self.val_per_epoch: list[float] = []

    @staticmethod
    def split(batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = batch
        return x, (y[:, 0] > 0).long()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = self.split(batch)
        logits = self.net(x)
        self.seen.append((logits.argmax(-1).detach(), y))
        self.train_acc(logits, y)
        self.log("train/acc", self.train_acc, on_step=True, on_epoch=True)
        return F.cross_entropy(logits, y)

    def on_train_epoch_end(self) -> None:
        preds, targets = map(torch.cat, zip(*self.seen))
        manual = (preds == targets).float().mean().item()
        self.per_epoch.append(manual)
        self.seen.clear()
        assert float(self.trainer.callback_metrics["train/acc_epoch"]) == pytest.approx(manual, abs=1e-6)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = self.split(batch)
        self.val_seen.append(((self.net(x).argmax(-1) == y).sum().item(), len(y)))
        self.val_acc.update(self.net(x), y)
        self.log("val/acc", self.val_acc)

    def on_validation_end(self) -> None:  # each validation's value covers that validation only (then reset)
        correct, total = map(sum, zip(*self.val_seen))
        self.val_seen.clear()
        self.val_per_epoch.append(correct / total)
        assert float(self.trainer.callback_metrics["val/acc"]) == pytest.approx(correct / total, abs=1e-6)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.5)


def test_torchmetrics_epoch_values_equal_a_manual_computation() -> None:
    module = Classifier()
    train = make_loader(make_regression_data(n=60, seed=1), batch_size=8, shuffle=True)  # last batch of 4
    val_data = make_regression_data(n=28, seed=2)
    trainer = bare(max_epochs=3, seed=0, num_sanity_val_steps=0)
    trainer.fit(module, train, make_loader(val_data, batch_size=8))
    assert len(module.per_epoch) == 3 and len(set(module.per_epoch)) > 1  # reset between epochs
    assert len(module.val_per_epoch) == 3 and len(set(module.val_per_epoch)) > 1
    assert float(trainer.callback_metrics["train/acc_epoch"]) == pytest.approx(module.per_epoch[-1], abs=1e-6)
    x, y = Classifier.split(val_data.tensors)
    with torch.no_grad():
        manual = (module.net(x).argmax(-1) == y).float().mean().item()
    assert float(trainer.callback_metrics["val/acc"]) == pytest.approx(manual, abs=1e-6)
    # the step value is the batch's own accuracy (torchmetrics forward), not the running one
    assert "train/acc_step" in trainer.callback_metrics
    assert trainer.validate(module, make_loader(val_data, batch_size=5)) == [{"val/acc": pytest.approx(manual)}]


class Reductions(Regressor):
    def validation_step(self, batch: Any, batch_idx: int) -> None:
        x, y = batch
        self.log("val/mse", F.mse_loss(self(x), y))  # mean weighted by the batch size (inferred)
        self.log("val/mse_w1", F.mse_loss(self(x), y), batch_size=1)  # unweighted mean of batch means
        self.log("val/idx_sum", float(batch_idx), reduce_fx="sum")
        self.log("val/idx_max", torch.tensor(float(batch_idx)), reduce_fx="max")
        self.log("val/idx_min", float(batch_idx), reduce_fx=torch.min)


def test_epoch_reductions_mean_is_weighted_by_batch_size_and_sum_max_min() -> None:
    data = make_regression_data(n=20)  # batches of 8, 8, 4
    module = Reductions()
    (result,) = bare().validate(module, make_loader(data, batch_size=8))
    x, y = data.tensors
    with torch.no_grad():
        full = F.mse_loss(module(x), y).item()
        means = [F.mse_loss(module(x[i:i + 8]), y[i:i + 8]).item() for i in (0, 8, 16)]
    assert result["val/mse"] == pytest.approx(full, rel=1e-6)
    assert result["val/mse_w1"] == pytest.approx(sum(means) / 3, rel=1e-6)
    assert result["val/mse"] != pytest.approx(result["val/mse_w1"], rel=1e-3)
    assert (result["val/idx_sum"], result["val/idx_max"], result["val/idx_min"]) == (3.0, 2.0, 0.0)


class Logs(Regressor):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        loss = super().training_step(batch, batch_idx)  # "train/loss": per step (the training default)
        self.log("both", loss, on_epoch=True, prog_bar=True)
        self.log("hidden", 1.0, logger=False)
        return loss

    def on_train_epoch_end(self) -> None:
        self.log("epoch_hook", 7.0)  # epoch-level hook: per epoch by default


def read_csv(path: str) -> list[dict[str, str]]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def test_defaults_per_stage_and_what_the_loggers_get(tmp_path: Any) -> None:
    logger = CSVLogger(str(tmp_path), name="")
    trainer = bare(max_epochs=2, logger=logger, log_every_n_steps=2)
    data = make_regression_data(n=48)  # 6 steps per epoch
    trainer.fit(Logs(), make_loader(data, batch_size=8), make_loader(make_regression_data(n=16), batch_size=8))
    rows = read_csv(os.path.join(logger.log_dir, "metrics.csv"))
    step_rows = [r for r in rows if r["train/loss"]]
    assert [int(r["step"]) for r in step_rows] == [2, 4, 6, 8, 10, 12]
    assert all(r["both_step"] for r in step_rows) and "hidden" not in rows[0]
    epoch_rows = [r for r in rows if r["both_epoch"]]
    assert [int(r["step"]) for r in epoch_rows] == [6, 12]
    assert all(r["epoch_hook"] == "7.0" for r in epoch_rows)
    assert [r["epoch"] for r in epoch_rows] == ["0", "1"]
    assert len([r for r in rows if r["val/loss"]]) == 2 and "val/loss_step" not in rows[0]
    assert set(trainer.progress_bar_metrics) == {"both_step", "both_epoch"}
    assert {"train/loss", "both", "both_step", "both_epoch", "hidden", "epoch_hook", "val/loss"} <= set(
        trainer.callback_metrics)
    # As Lightning's: the "epoch" label goes to the loggers (the CSV's epoch column above), not into logged_metrics
    assert set(trainer.logged_metrics) >= {"train/loss", "both_epoch", "val/loss"}
    assert "epoch" not in trainer.logged_metrics


def test_metrics_stay_on_the_device_until_logged() -> None:
    trainer = bare(max_steps=3)
    trainer.fit(Logs(), make_loader(make_regression_data(n=32), batch_size=8))
    assert isinstance(trainer.callback_metrics["train/loss"], torch.Tensor)
    assert not trainer.callback_metrics["train/loss"].requires_grad


class Bad(Regressor):
    def __init__(self, value: Any, **options: Any) -> None:
        super().__init__()
        self.value, self.options = value, options

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.log("bad", self.value, **self.options)
        return super().training_step(batch, batch_idx)


@pytest.mark.parametrize("value, options, error, match", [
    (torch.ones(3), {}, ValueError, r"self.log\('bad'\) got a tensor of shape \(3,\)"),
    ("high", {}, TypeError, "expected a number"),
    (1.0, {"reduce_fx": "median"}, ValueError, r"self.log\('bad', reduce_fx='median'\): not a reduction"),
    (1.0, {"on_step": False, "on_epoch": False}, ValueError, "records nothing"),
])
def test_bad_log_calls_fail_with_the_name(value: Any, options: dict, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        bare(max_steps=1).fit(Bad(value, **options), make_loader(make_regression_data(n=8)))


@pytest.mark.parametrize("value", [None, {"a": 1}, [1, 2]])
def test_a_value_that_is_not_a_number_names_the_call_and_is_caught_as_either_error(value: Any) -> None:
    # TypeError by stoker's rule; a Lightning script's `except ValueError` for the same mistake still catches it.
    for error in (TypeError, ValueError):
        with pytest.raises(error, match=re.escape(f"`self.log(bad, {value})` was called with a {type(value).__name__}")):
            bare(max_steps=1).fit(Bad(value), make_loader(make_regression_data(n=8)))


def test_log_outside_a_trainer_warns_and_drops() -> None:
    with pytest.warns(UserWarning, match="outside a Trainer run"):
        Regressor().log("x", 1.0)


@pytest.mark.parametrize("logger", [None, True, False])
def test_an_explicit_logger_true_without_a_logger_warns(tmp_path: Any, logger: bool | None) -> None:
    class Logs(Regressor):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            loss = super().training_step(batch, batch_idx)
            self.log("extra", loss.detach(), logger=logger)
            return loss

    data = make_loader(make_regression_data(n=16), batch_size=8)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        trainer = bare(max_epochs=1, default_root_dir=str(tmp_path))
        trainer.fit(Logs(), data)
    said = [str(w.message) for w in caught if "but have no logger configured" in str(w.message)]
    assert len(said) == (2 if logger is True else 0)  # one per call: Python's default filter shows it once
    assert said[:1] in ([], ["You called `self.log('extra', ..., logger=True)` but have no logger configured: the "
                             "value reaches callback_metrics and the progress bar only. Give the Trainer a logger, or "
                             "log with logger=False."])
    assert "extra" in trainer.callback_metrics
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")  # a logger to write to: nothing to say
        bare(max_epochs=1, default_root_dir=str(tmp_path), logger=CSVLogger(str(tmp_path)), log_every_n_steps=1).fit(
            Logs(), data)
    assert not [w for w in caught if "no logger configured" in str(w.message)]


class WithHparams(TrainingModule):
    def __init__(self, hidden: int = 16, lr: float = 0.1, *, name: str = "mlp", big: Any = None) -> None:
        super().__init__()
        self.save_hyperparameters(ignore="big")
        self.net = make_mlp(hidden=hidden)

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x, y = batch
        return F.mse_loss(self.net(x), y)

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=self.hparams.lr)


class Extras(Callback):
    def __init__(self) -> None:
        self.loaded: dict | None = None

    def on_save_checkpoint(self, trainer: Trainer, module: Any, checkpoint: dict) -> None:
        checkpoint["extra"] = {"note": "hello", "tensor": torch.arange(3)}

    def on_load_checkpoint(self, trainer: Trainer, module: Any, checkpoint: dict) -> None:
        self.loaded = checkpoint


def test_save_hyperparameters_reach_loggers_and_checkpoints(tmp_path: Any) -> None:
    module = WithHparams(hidden=8, big=torch.zeros(1000))
    assert module.hparams == {"hidden": 8, "lr": 0.1, "name": "mlp"} and module.hparams.lr == 0.1
    logger = CSVLogger(str(tmp_path), name="")
    trainer = bare(max_steps=2, logger=logger, callbacks=[Extras()], default_root_dir=str(tmp_path))
    trainer.fit(module, make_loader(make_regression_data(n=16)))
    with open(os.path.join(logger.log_dir, "hparams.yaml")) as f:
        assert 'hidden: 8' in f.read()
    trainer.save_checkpoint(tmp_path / "ckpt")
    extras = Extras()
    resumed = bare(max_steps=3, callbacks=[extras], default_root_dir=str(tmp_path))
    resumed.fit(WithHparams(hidden=8), make_loader(make_regression_data(n=16)), ckpt_path=tmp_path / "ckpt")
    assert extras.loaded["hyper_parameters"] == {"hidden": 8, "lr": 0.1, "name": "mlp"}
    assert extras.loaded["extra"]["note"] == "hello" and extras.loaded["extra"]["tensor"].tolist() == [0, 1, 2]
    assert extras.loaded["global_step"] == 2 and resumed.global_step == 3


def test_save_hyperparameters_by_name_and_unknown_names() -> None:
    class Named(WithHparams):
        def __init__(self, hidden: int = 4, lr: float = 0.2) -> None:
            TrainingModule.__init__(self)
            self.save_hyperparameters("lr")

    assert Named().hparams == {"lr": 0.2}

    class Unknown(WithHparams):
        def __init__(self, hidden: int = 4) -> None:
            TrainingModule.__init__(self)
            self.save_hyperparameters("depth")

    with pytest.raises(ValueError, match=r"\['depth'\] are not arguments"):
        Unknown()


def test_an_evaluation_step_value_reaches_the_loggers_but_not_callback_metrics() -> None:
    class Steps(Regressor):
        def validation_step(self, batch: Any, batch_idx: int) -> None:
            x, y = batch
            self.log("b", F.mse_loss(self(x), y), on_step=True, on_epoch=True)

    trainer = bare(max_epochs=1, log_every_n_steps=1, logger=ListLogger())
    trainer.fit(Steps(), make_loader(make_regression_data(n=16), batch_size=8),
                make_loader(make_regression_data(n=16), batch_size=8))
    assert {"b_step", "b_epoch"} <= set(trainer.logged_metrics)
    assert {"b", "b_epoch"} <= set(trainer.callback_metrics) and "b_step" not in trainer.callback_metrics
    assert "train/loss" in trainer.callback_metrics  # a training step value stays (what callbacks monitor)


def test_add_dataloader_idx_false_keeps_the_name_in_the_results_of_the_loader_it_came_from() -> None:
    class TwoLoaders(Regressor):
        def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            self.log("shared", 1.0 + dataloader_idx)  # suffixed per loader
            self.log(f"only_{dataloader_idx}", 10.0 * (dataloader_idx + 1), add_dataloader_idx=False)
            self.log_dict({"plain": 5.0}, add_dataloader_idx=False)  # both loaders, one name

    data = make_loader(make_regression_data(n=8), batch_size=8)
    results = bare().test(TwoLoaders(), [data, data])
    assert results[0] == {"shared/dataloader_idx_0": 1.0, "only_0": 10.0, "plain": 5.0}
    assert results[1] == {"shared/dataloader_idx_1": 2.0, "only_1": 20.0, "plain": 5.0}


def test_numbers_are_kept_as_exact_tensors_and_a_loaders_suffix_stays_last() -> None:
    class Numbers(Regressor):
        def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
            self.log("count", 2)
            self.log("rate", 0.09)
            return super().training_step(batch, batch_idx)

        def test_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
            self.log("t", float(dataloader_idx), on_step=True, on_epoch=True)

    trainer = bare(max_steps=1, log_every_n_steps=1, logger=ListLogger())
    module = Numbers()
    trainer.fit(module, make_loader(make_regression_data(n=8), batch_size=8))
    assert all(isinstance(v, torch.Tensor) for v in trainer.callback_metrics.values())
    assert all(isinstance(v, torch.Tensor) for v in trainer.logged_metrics.values())
    assert float(trainer.callback_metrics["rate"]) == 0.09 and float(trainer.callback_metrics["count"]) == 2
    data = make_loader(make_regression_data(n=8), batch_size=8)
    results = trainer.test(module, [data, data])
    assert results[1] == {"t_epoch/dataloader_idx_1": 1.0}
    assert {"t_step/dataloader_idx_0", "t_epoch/dataloader_idx_0"} <= set(trainer.logged_metrics)


@pytest.mark.parametrize("stage", ["validate", "test", "fit"])
def test_the_epoch_end_hooks_read_this_evaluations_values(stage: str) -> None:
    """A callback's ``on_validation_epoch_end`` (``on_test_epoch_end``) reads the values the steps of this evaluation
    logged, as in Lightning: not the previous validation's, and on the first one too."""
    name, hook = ("test/loss", "on_test_epoch_end") if stage == "test" else ("val/loss", "on_validation_epoch_end")
    seen: list[float | None] = []
    after: list[float] = []

    class Read(Callback):
        def on_validation_end(self, trainer: Any, module: Any) -> None:
            after.append(float(trainer.callback_metrics[name]))

        on_test_end = on_validation_end

    def read(self: Any, trainer: Any, module: Any) -> None:
        value = trainer.callback_metrics.get(name)
        seen.append(None if value is None else float(value))

    setattr(Read, hook, read)
    trainer = bare(max_epochs=2, num_sanity_val_steps=0, enable_model_summary=False, callbacks=[Read()])
    module, loader = Regressor(), make_loader(make_regression_data(n=32))
    if stage == "fit":
        trainer.fit(module, loader, make_loader(make_regression_data(n=16, seed=1)))
    else:
        getattr(trainer, stage)(module, make_loader(make_regression_data(n=16, seed=1)))
    assert len(seen) == len(after) == (2 if stage == "fit" else 1)
    assert seen == after  # the same value the end hooks read, computed before the epoch-end hooks ran
