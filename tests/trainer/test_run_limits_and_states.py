"""The run's limits (``trainer.limits``, what the loops read) and their public views: the core Trainer's
``max_epochs`` / ``max_steps`` (None: no limit) and stoker.Trainer's in Lightning's spelling (``max_steps`` -1 when
unset, ``max_epochs`` as given); ``trainer.state``'s members; ``val_check_batch``; ``num_sanity_val_batches`` outside
a fit's sanity check."""

from __future__ import annotations

from datetime import timedelta

import pytest
import torch
from torch.utils.data import DataLoader, IterableDataset

from stoker import Callback, StochasticWeightAveraging
from stoker.trainer import Trainer as CoreTrainer
from stoker.trainer.options import RunLimits
from stoker.trainer.states import RunningStage, TrainerFn, TrainerState, TrainerStatus
from tests.callbacks.modules import loaders
from tests.helpers.models import IN_FEATURES, OUT_FEATURES, Regressor
from tests.helpers.trainers import quiet_trainer


def test_run_limits_check_each_value_and_answer_the_loops_questions() -> None:
    limits = RunLimits(max_epochs=-1, max_steps=4)
    assert (limits.max_epochs, limits.max_steps) == (None, 4)
    assert not limits.steps_reached(3) and limits.steps_reached(4)
    assert not RunLimits().steps_reached(10**9)
    assert RunLimits().epochs_to_run(None) == 1 and RunLimits().epochs_to_run(3) == 3
    assert RunLimits(max_steps=5).epochs_to_run(None) is None and RunLimits(max_epochs=2).epochs_to_run(7) == 2
    with pytest.raises(ValueError, match=r"max_steps=-2"):
        limits.max_steps = -2
    with pytest.raises(ValueError, match=r"max_epochs='3'"):
        RunLimits(max_epochs="3")


def test_the_core_trainer_reads_and_sets_its_limits_with_none_for_no_limit() -> None:
    trainer = CoreTrainer(max_steps=-1, logger=False, enable_progress_bar=False)
    assert trainer.max_steps is None and trainer.max_epochs is None and trainer.limits == RunLimits()
    trainer.max_steps = 8
    assert trainer.limits.max_steps == 8 and trainer.max_steps == 8
    with pytest.raises(ValueError, match="max_epochs=-3"):
        trainer.max_epochs = -3


@pytest.mark.parametrize(("given", "epochs", "steps"), [
    ({}, None, -1), ({"max_epochs": -1}, -1, -1), ({"max_epochs": 5}, 5, -1), ({"max_epochs": -1, "max_steps": 10},
                                                                              -1, 10),
    ({"max_steps": 0}, None, 0), ({"max_epochs": 0, "max_steps": -1}, 0, -1), ({"max_steps": None}, None, -1),
])
def test_stoker_trainer_spells_its_limits_as_lightning(given: dict, epochs: int | None, steps: int) -> None:
    trainer = quiet_trainer(**given)
    assert trainer.max_epochs == epochs and trainer.max_steps == steps
    unlimited = {None: None, -1: None}
    assert trainer.limits == RunLimits(unlimited.get(epochs, epochs), unlimited.get(steps, steps))


def test_lightning_spelled_limits_still_stop_the_fit_where_they_should() -> None:
    endless_epochs = quiet_trainer(max_epochs=-1, max_steps=6)
    endless_epochs.fit(Regressor(), loaders()[0])  # 4 batches per epoch
    assert endless_epochs.global_step == 6 and endless_epochs.max_epochs == -1
    by_epochs = quiet_trainer(max_epochs=2, max_steps=-1)
    by_epochs.fit(Regressor(), loaders()[0])
    assert by_epochs.global_step == 8 and by_epochs.current_epoch == 2 and by_epochs.max_steps == -1
    by_epochs.max_epochs = -1  # read back as set; the run now has no epoch limit
    assert by_epochs.max_epochs == -1 and by_epochs.limits.max_epochs is None
    by_epochs.max_epochs = None
    assert by_epochs.max_epochs is None and by_epochs.estimated_stepping_batches == 4  # neither: one epoch


def test_a_fit_limited_by_steps_alone_reads_no_epoch_limit_from_then_on() -> None:
    trainer = quiet_trainer(max_steps=3)
    assert trainer.max_epochs is None  # not given, and no fit yet
    trainer.fit(Regressor(), loaders()[0])
    assert trainer.global_step == 3 and trainer.max_epochs == -1 and trainer.limits.max_epochs is None


def test_a_fit_without_limits_reads_as_not_set_and_trains_one_epoch() -> None:
    trainer = quiet_trainer()
    trainer.fit(Regressor(), loaders()[0])
    assert trainer.global_step == 4 and trainer.max_epochs is None and trainer.max_steps == -1


def test_swa_takes_lightnings_minus_one_as_no_epoch_limit(tmp_path) -> None:
    swa = StochasticWeightAveraging(0.05, swa_epoch_start=0.5)
    endless = quiet_trainer(default_root_dir=str(tmp_path), max_epochs=-1, max_steps=3, callbacks=[swa])
    with pytest.raises(ValueError, match="fraction of max_epochs, but the Trainer has no max_epochs"):
        endless.fit(Regressor(), loaders()[0])
    one_epoch = StochasticWeightAveraging(0.05, swa_epoch_start=0.5)
    quiet_trainer(default_root_dir=str(tmp_path), callbacks=[one_epoch]).fit(Regressor(), loaders()[0])
    assert one_epoch.start_epoch == 0  # neither limit: one epoch, half of it rounds to the first


def test_the_state_reads_as_lightnings_members_and_prints_as_stokers_strings() -> None:
    seen: list[tuple] = []

    class Record(Callback):
        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            seen.append((trainer.state.fn, trainer.state.stage, trainer.state.status))

        def on_validation_batch_start(self, trainer, module, batch, batch_idx, dataloader_idx=0):
            seen.append((trainer.state.fn, trainer.state.stage, trainer.state.status))

    trainer = quiet_trainer(max_epochs=1, callbacks=[Record()], num_sanity_val_steps=0)
    assert isinstance(trainer.state, TrainerState) and trainer.state.status is TrainerStatus.INITIALIZING
    trainer.fit(Regressor(), *loaders())
    assert seen[0] == (TrainerFn.FITTING, RunningStage.TRAINING, TrainerStatus.RUNNING)
    assert seen[-1][1] is RunningStage.VALIDATING and seen[-1][1].value == "validate" and seen[-1][1] == "validate"
    assert all(type(value) in (TrainerFn, RunningStage, TrainerStatus) for row in seen for value in row)
    assert trainer.state.status is TrainerStatus.FINISHED and trainer.state.stage is None
    assert f"Trainer.{seen[0][0]}()" == "Trainer.fit()" and str(seen[0][1]) == "train"
    trainer.state.stage = "test"  # a string set is read back as its member
    assert trainer.state.stage is RunningStage.TESTING and {"test": 1}[trainer.state.stage] == 1
    with pytest.raises(ValueError, match="'testing'"):
        trainer.state.stage = "testing"


class _Stream(IterableDataset):
    def __iter__(self):
        for _ in range(4):
            yield torch.randn(2, IN_FEATURES), torch.randn(2, OUT_FEATURES)


@pytest.mark.parametrize(("kwargs", "expected"), [
    ({"val_check_interval": 3}, 3), ({"val_check_interval": 0.5}, 2), ({}, 4),
    ({"val_check_interval": 0.1}, 1), ({"val_check_interval": timedelta(minutes=5)}, None),
    ({"limit_val_batches": 0, "val_check_interval": 0.5}, 2),
])
def test_val_check_batch_is_the_fits_validation_interval_in_batches(kwargs: dict, expected) -> None:
    trainer = quiet_trainer(max_epochs=1, **kwargs)
    assert trainer.val_check_batch is None  # before a fit knows its train loader
    trainer.fit(Regressor(), *loaders())  # 4 train batches
    assert trainer.val_check_batch == expected


def test_val_check_batch_is_infinite_for_a_loader_without_length() -> None:
    trainer = quiet_trainer(max_steps=3)
    trainer.fit(Regressor(), DataLoader(_Stream(), batch_size=None))
    assert trainer.val_check_batch == float("inf")


def test_num_sanity_val_batches_is_a_fact_of_a_fits_sanity_check_only() -> None:
    without = quiet_trainer(max_epochs=1, num_sanity_val_steps=0)
    without.fit(Regressor(), *loaders())
    assert without.num_val_batches == [2] and without.num_sanity_val_batches == []  # none asked for
    checked = quiet_trainer(max_epochs=1, num_sanity_val_steps=1)
    checked.validate(Regressor(), loaders()[1])
    assert checked.num_val_batches == [2] and checked.num_sanity_val_batches == []  # no fit yet
    checked.fit(Regressor(), *loaders())
    assert checked.num_sanity_val_batches == [1]
