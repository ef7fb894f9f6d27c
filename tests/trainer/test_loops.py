"""The loops: validation schedule, batch limits, stopping rules, eval mode, schedulers, multiple loaders."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

from stoker import Callback, Trainer
from tests.helpers.models import Regressor, batches, clone_model, make_loader, make_regression_data, raw_loop
from tests.helpers.trainers import quiet_trainer as bare
from tests.helpers.weights import params_of


class Where(Callback):
    """Records (epoch, batches seen in the epoch) at each validation, and the number of validation batches."""

    def __init__(self) -> None:
        self.at: list[tuple[int, int]] = []
        self.batches = 0
        self.val_batches = 0

    def on_train_epoch_start(self, trainer: Trainer, module: Any) -> None:
        self.batches = 0

    def on_train_batch_end(self, trainer: Trainer, module: Any, *args: Any) -> None:
        self.batches += 1

    def on_validation_batch_end(self, trainer: Trainer, module: Any, *args: Any) -> None:
        self.val_batches += 1

    def on_validation_end(self, trainer: Trainer, module: Any) -> None:
        self.at.append((trainer.current_epoch, self.batches))


def validations(n: int = 56, **kwargs: Any) -> Where:
    where = Where()
    trainer = bare(callbacks=[where], num_sanity_val_steps=0, **kwargs)
    trainer.fit(Regressor(), make_loader(make_regression_data(n=n), batch_size=8),
                make_loader(make_regression_data(n=24), batch_size=8))
    return where


@pytest.mark.parametrize("kwargs, expected", [
    ({"max_epochs": 2}, [(0, 7), (1, 7)]),
    ({"max_epochs": 1, "val_check_interval": 0.5}, [(0, 3), (0, 6)]),
    ({"max_epochs": 1, "val_check_interval": 0.25, "n": 64}, [(0, 2), (0, 4), (0, 6), (0, 8)]),
    ({"max_epochs": 2, "val_check_interval": 3}, [(0, 3), (0, 6), (1, 3), (1, 6)]),
    ({"max_epochs": 4, "check_val_every_n_epoch": 2}, [(1, 7), (3, 7)]),
    ({"max_epochs": 2, "val_check_interval": 5, "check_val_every_n_epoch": None}, [(0, 5), (1, 3)]),
    ({"max_epochs": 2, "limit_val_batches": 0}, []),
])
def test_validation_schedule(kwargs: dict, expected: list) -> None:
    assert validations(**kwargs).at == expected


def test_limits_count_batches_and_the_last_kept_batch_closes_the_window() -> None:
    data = make_regression_data(n=80)  # 10 batches; only 5 used: windows 2, 2, 1
    module = Regressor()
    reference = raw_loop(clone_model(module.net), batches(data, 8)[:5], epochs=2, accumulate=2)
    where = Where()
    trainer = bare(max_epochs=2, accumulate=2, limit_train_batches=5, limit_val_batches=0.5, callbacks=[where],
                   num_sanity_val_steps=0)
    trainer.fit(module, make_loader(data, batch_size=8), make_loader(make_regression_data(n=32), batch_size=8))
    for got, want in zip(params_of(module.net), params_of(reference)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert trainer.num_training_batches == 5 and trainer.num_val_batches == [2]
    assert trainer.global_step == 6 and where.val_batches == 4
    trainer = bare(limit_test_batches=1)
    trainer.test(module, make_loader(data, batch_size=8))
    assert trainer.num_test_batches == [1]


def test_max_steps_counts_optimizer_steps_and_a_second_fit_continues() -> None:
    data = make_regression_data(n=56)  # 7 batches: windows 2, 2, 2, 1
    module = Regressor(momentum=0.0)  # a second fit calls configure_optimizers again: no state to carry
    reference = raw_loop(clone_model(module.net), batches(data, 8), epochs=2, accumulate=2, momentum=0.0)
    trainer = bare(max_steps=3, accumulate=2)
    trainer.fit(module, make_loader(data, batch_size=8))
    assert (trainer.global_step, trainer.current_epoch, trainer.fit_loop.batches_done) == (3, 0, 6)
    assert {k: v for k, v in trainer.fit_run.train_loader.state_dict().items() if k != "seed"} == {
        "epoch": 0, "batches_yielded": 6}  # the loader agrees: mid-epoch
    trainer.max_steps = 8  # the same Trainer continues at the next batch of the same epoch
    trainer.fit(module, make_loader(data, batch_size=8))
    assert (trainer.global_step, trainer.current_epoch) == (8, 2)
    for got, want in zip(params_of(module.net), params_of(reference)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_a_stop_on_the_last_batch_ends_the_loader_epoch_too() -> None:
    trainer = bare(max_steps=4, accumulate=2)  # 7 batches: windows 2, 2, 2, 1 -> step 4 is the last batch
    trainer.fit(Regressor(), make_loader(make_regression_data(n=56), batch_size=8))
    assert (trainer.global_step, trainer.current_epoch, trainer.fit_loop.batches_done) == (4, 1, 0)
    assert {k: v for k, v in trainer.fit_run.train_loader.state_dict().items() if k != "seed"} == {
        "epoch": 1, "batches_yielded": 0}


def test_neither_max_epochs_nor_max_steps_means_one_epoch() -> None:
    trainer = bare()
    trainer.fit(Regressor(), make_loader(make_regression_data(n=24), batch_size=8))
    assert (trainer.current_epoch, trainer.global_step) == (1, 3)


class StopAt(Callback):
    def __init__(self, step: int) -> None:
        self.step = step

    def on_train_batch_end(self, trainer: Trainer, module: Any, *args: Any) -> None:
        if trainer.global_step >= self.step:
            trainer.should_stop = True


def test_should_stop_ends_at_the_next_optimizer_step() -> None:
    trainer = bare(max_epochs=5, accumulate=2, callbacks=[StopAt(2)])
    trainer.fit(Regressor(), make_loader(make_regression_data(n=56), batch_size=8))
    assert trainer.global_step == 2 and trainer.current_epoch == 0 and trainer.fit_loop.batches_done == 4


class Stream(IterableDataset):
    def __init__(self, n: int) -> None:
        self.data = make_regression_data(n=n)

    def __iter__(self) -> Any:
        return iter(zip(*self.data.tensors))


def test_a_loader_without_length_with_max_steps_and_max_epochs() -> None:
    trainer = bare(max_steps=5)
    trainer.fit(Regressor(), DataLoader(Stream(24), batch_size=8))
    assert (trainer.global_step, trainer.current_epoch) == (5, 1)
    assert trainer.num_training_batches == float("inf")
    trainer = bare(max_epochs=2, accumulate=2)
    trainer.fit(Regressor(), DataLoader(Stream(24), batch_size=8))
    assert trainer.global_step == 4  # windows 2, 1 per epoch: the end of the stream closes the window


class Modes(Regressor):
    def __init__(self) -> None:
        super().__init__()
        self.frozen = torch.nn.BatchNorm1d(8).eval()
        self.seen: list[tuple[str, bool, bool]] = []

    def _record(self, stage: str) -> None:
        self.seen.append((stage, self.training, torch.is_grad_enabled()))

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self._record("train")
        return super().training_step(batch, batch_idx)

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._record("val")
        super().validation_step(batch, batch_idx)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._record("test")

    def predict_step(self, batch: Any, batch_idx: int) -> Any:
        self._record("predict")
        return self(batch[0])


def test_evaluation_runs_in_eval_mode_without_gradients_then_restores_modes() -> None:
    module = Modes()
    loader = make_loader(make_regression_data(n=16), batch_size=8)
    trainer = bare(max_epochs=1)
    trainer.fit(module, loader, loader)
    trainer.test(module, loader)
    predictions = trainer.predict(module, loader)
    assert set(module.seen) == {("train", True, True), ("val", False, False), ("test", False, False),
                                ("predict", False, False)}
    assert module.training and module.net.training and not module.frozen.training
    assert len(predictions) == 2 and predictions[0].shape == (8, 2)


def test_epoch_schedulers_with_frequency_and_reduce_on_plateau() -> None:
    module = Regressor(scheduler="step", interval="epoch", frequency=2)
    trainer = bare(max_epochs=5)
    trainer.fit(module, make_loader(make_regression_data(n=16), batch_size=8))
    assert trainer.lr_scheduler_configs[0].scheduler.last_epoch == 2  # after epochs 2 and 4
    module = Regressor(lr=0.5, scheduler="plateau", interval="epoch")  # lr too high: val/loss will not improve
    trainer = bare(max_epochs=4)
    trainer.fit(module, make_loader(make_regression_data(n=16), batch_size=8),
                make_loader(make_regression_data(n=16, seed=5), batch_size=8))
    assert trainer.optimizers[0].param_groups[0]["lr"] < 0.5


class TwoLoaders(Regressor):
    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.log("val/idx", float(dataloader_idx))


def test_several_validation_loaders_get_suffixed_metrics() -> None:
    loaders = [make_loader(make_regression_data(n=8)), make_loader(make_regression_data(n=16))]
    results = bare().validate(TwoLoaders(), loaders)
    assert results == [{"val/idx/dataloader_idx_0": 0.0}, {"val/idx/dataloader_idx_1": 1.0}]


def test_validate_and_test_return_epoch_metrics_and_load_weights_from_a_checkpoint(tmp_path: Any) -> None:
    module = Regressor()
    loader = make_loader(make_regression_data(n=16), batch_size=8)
    trainer = bare(max_epochs=2, default_root_dir=str(tmp_path))
    trainer.fit(module, loader)
    trainer.save_checkpoint(tmp_path / "checkpoints" / "last")
    (tested,) = trainer.test(module, loader)
    fresh = Regressor()
    assert bare(default_root_dir=str(tmp_path)).test(fresh, loader, ckpt_path="last") == [tested]
    assert bare().validate(Regressor(), loader) != [{"val/loss": tested["test/loss"]}]


def test_same_seed_same_run() -> None:
    def train() -> list[torch.Tensor]:
        module = Regressor(dropout=0.3)
        bare(max_epochs=2, seed=7).fit(module, make_loader(make_regression_data(n=32), batch_size=8, shuffle=True))
        return params_of(module)

    for a, b in zip(train(), train()):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_estimated_stepping_batches() -> None:
    trainer = bare(max_epochs=3, accumulate=2, limit_train_batches=5)
    trainer.fit(Regressor(), make_loader(make_regression_data(n=80), batch_size=8))
    assert trainer.estimated_stepping_batches == 9 == trainer.global_step


def test_a_none_batch_is_skipped_with_one_warning_and_its_end_hooks_get_none() -> None:
    class Ends(Callback):
        def __init__(self) -> None:
            self.outputs: list[Any] = []
            self.starts = 0

        def on_train_batch_start(self, trainer: Trainer, module: Any, *args: Any) -> None:
            self.starts += 1

        def on_train_batch_end(self, trainer: Trainer, module: Any, outputs: Any, *args: Any) -> None:
            self.outputs.append(outputs if outputs is None else "loss")

    data = make_regression_data(n=32)
    drop_odd = iter(range(100))

    def collate(samples: list[Any]) -> Any:
        stacked = torch.utils.data.default_collate(samples)
        return None if next(drop_odd) % 2 else stacked

    ends = Ends()
    trainer = bare(max_epochs=2, callbacks=[ends])
    with pytest.warns(UserWarning, match="train_dataloader yielded None as batch 1 of epoch 0") as caught:
        trainer.fit(Regressor(), DataLoader(data, batch_size=8, collate_fn=collate))
    assert sum("yielded None" in str(w.message) for w in caught) == 1  # once per run
    assert ends.outputs == ["loss", None] * 4 and ends.starts == 4
    assert trainer.global_step == 4 and trainer.current_epoch == 2


@pytest.mark.parametrize("limit", [0, 0.0])
def test_a_val_check_interval_past_the_epoch_is_fine_when_nothing_validates(limit: Any) -> None:
    trainer = bare(max_epochs=1, val_check_interval=10, limit_val_batches=limit)
    trainer.fit(Regressor(), make_loader(make_regression_data(n=40), batch_size=8))
    assert trainer.global_step == 5
    with pytest.raises(ValueError, match="val_check_interval=10"):  # validating, it would never run: an error
        bare(max_epochs=1, val_check_interval=10).fit(Regressor(), make_loader(make_regression_data(n=40)),
                                                      make_loader(make_regression_data(n=8)))


@pytest.mark.parametrize("limits, done", [
    ({"max_epochs": 3}, False), ({"max_epochs": 0}, True), ({"max_steps": 0}, True), ({"max_steps": 5}, False),
    ({"max_epochs": -1, "max_steps": 10}, False), ({"max_epochs": -1, "max_steps": 0}, True),
])
def test_fit_loop_done_is_a_property_read_from_the_limits_before_a_fit(limits, done):
    """Lightning's ``trainer.fit_loop.done``: a bool (not a method), also before any fit."""
    trainer = bare(**limits)
    assert trainer.fit_loop.done is done


def test_fit_loop_done_after_a_fit_names_the_limit_that_ended_it():
    trainer = bare(max_epochs=2)
    trainer.fit(Regressor(), make_loader(make_regression_data(n=16), 8))
    assert trainer.fit_loop.done is True and trainer.fit_loop.stop_reason == "max_epochs"


class HookRecorder(Callback):
    def __init__(self) -> None:
        self.calls: list[str] = []

    def on_train_start(self, trainer: Any, module: Any) -> None:
        self.calls.append("train_start")

    def on_sanity_check_end(self, trainer: Any, module: Any) -> None:
        self.calls.append("sanity_check_end")

    def on_fit_end(self, trainer: Any, module: Any) -> None:
        self.calls.append("fit_end")


@pytest.mark.parametrize("limit", [0, 0.0])
def test_limit_train_batches_zero_turns_training_off(limit, tmp_path):
    """Lightning's switch: ``limit_train_batches=0`` runs a fit that trains nothing (the sanity check still runs),
    while a train loader that is empty stays an error (``test_errors.py``)."""
    module, recorder = Regressor(), HookRecorder()
    before = params_of(module)
    from stoker.loggers import CSVLogger

    trainer = bare(max_epochs=2, limit_train_batches=limit, callbacks=[recorder], logger=CSVLogger(str(tmp_path)))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*training batches")  # no warning about a count it does not train
        trainer.fit(module, make_loader(make_regression_data(n=16), 8), make_loader(make_regression_data(n=16), 8))
    assert all(torch.equal(a, b) for a, b in zip(before, params_of(module)))
    assert (trainer.global_step, trainer.current_epoch, trainer.num_training_batches) == (0, 0, 0)
    assert recorder.calls == ["sanity_check_end", "fit_end"] and trainer.fit_loop.stop_reason == "limit_train_batches=0"
