"""Lightning's registered strategy names: "single_device", and those that carry a DDP setting
(Trainer(strategy="ddp_find_unused_parameters_true"))."""

from __future__ import annotations

import pytest

from stoker import Trainer
from stoker.strategies import DDPStrategy


@pytest.mark.parametrize("name, expected", [("ddp_find_unused_parameters_true", True),
                                            ("DDP_find_unused_parameters_false", False)])
def test_the_name_builds_ddp_with_that_setting(name, expected) -> None:
    trainer = Trainer(strategy=name, accelerator="cpu", devices=1, logger=False, enable_progress_bar=False)
    strategy = trainer.accelerator.strategy
    try:
        assert isinstance(strategy, DDPStrategy)
        assert strategy.ddp_kwargs["find_unused_parameters"] is expected
    finally:
        trainer.accelerator.end_training()  # the one-process group DDP set up goes, as after a run


def test_single_device_is_one_process_on_one_device(tmp_path) -> None:
    from stoker.accelerator import SingleDevice
    from tests.helpers.models import Regressor, make_loader, make_regression_data

    trainer = Trainer(strategy="single_device", accelerator="cpu", devices=1, max_epochs=1, logger=False,
                      enable_progress_bar=False, default_root_dir=str(tmp_path))
    assert isinstance(trainer.accelerator.strategy, SingleDevice) and trainer.world_size == 1
    trainer.fit(Regressor(), make_loader(make_regression_data(16), 8))
    assert trainer.global_step == 2


def test_other_names_are_left_to_the_usual_checks() -> None:
    with pytest.raises(ValueError, match="is not a strategy"):
        Trainer(strategy="ddp_find_unused_parameters_maybe", accelerator="cpu", logger=False)
