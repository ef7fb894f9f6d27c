"""The accumulation window's length is stored once, by the Accelerator: ``trainer.accumulate`` reads and writes
``trainer.accelerator.gradient_accumulation_steps``, and ``fit`` and ``estimated_stepping_batches`` follow it."""

from __future__ import annotations

import functools

import pytest

from stoker.accelerator import InvalidArgumentError
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.trainers import quiet_trainer


bare = functools.partial(quiet_trainer, enable_model_summary=False)  # a quiet Trainer that prints no summary


def test_setting_the_accelerators_window_is_the_trainers_window() -> None:
    trainer = bare(max_epochs=1, accumulate=2)
    assert trainer.accumulate == trainer.accelerator.gradient_accumulation_steps == 2
    trainer.accelerator.gradient_accumulation_steps = 4
    assert trainer.accumulate == 4
    trainer.fit(Regressor(), make_loader(make_regression_data(n=64), batch_size=8))  # 8 batches
    assert trainer.global_step == 2 == trainer.estimated_stepping_batches


def test_setting_trainer_accumulate_writes_the_accelerator() -> None:
    trainer = bare(max_epochs=1)
    trainer.accumulate = 3
    assert trainer.accelerator.gradient_accumulation_steps == 3
    trainer.fit(Regressor(), make_loader(make_regression_data(n=64), batch_size=8))
    assert trainer.global_step == 3 == trainer.estimated_stepping_batches  # windows 3, 3, 2
    with pytest.raises(InvalidArgumentError, match=r"trainer\.accumulate = 0"):
        trainer.accumulate = 0
    assert trainer.accumulate == 3
