"""The general helpers a Lightning script imports from ``utilities`` (after the rename, ``stoker.utilities``), checked
against pytorch_lightning's own, and the Lightning Trainer arguments whose ``None`` means "the default"."""

from __future__ import annotations

import os
import warnings

import pytest
import pytorch_lightning.utilities as pl_utilities
import torch

from stoker import Trainer
from stoker.user_frame import PossibleUserWarning
from stoker.utilities import (disable_possible_user_warnings, measure_flops, move_data_to_device,
                              rank_zero_deprecation, suggested_max_num_workers)


def test_the_worker_bound_and_the_flop_count_are_lightnings() -> None:
    for processes in (1, 2, 64):
        assert suggested_max_num_workers(processes) == pl_utilities.suggested_max_num_workers(processes)
    with pytest.raises(ValueError, match=">= 1"):
        suggested_max_num_workers(0)
    with pytest.raises(TypeError, match="expected an int"):
        suggested_max_num_workers("2")  # type: ignore[arg-type]
    with torch.device("meta"):
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 2))
        x = torch.randn(4, 8)
    forward, loss = (lambda: model(x)), (lambda y: y.sum())
    assert measure_flops(model, forward) == pl_utilities.measure_flops(model, forward) == 2 * 4 * (8 * 16 + 16 * 2)
    assert measure_flops(model, forward, loss) == pl_utilities.measure_flops(model, forward, loss)


def test_disable_possible_user_warnings_silences_them_and_nothing_else() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        disable_possible_user_warnings()
        warnings.warn("may be intended", PossibleUserWarning)
        warnings.warn("a real problem", UserWarning)
        rank_zero_deprecation("old name")
    assert [(w.category, str(w.message)) for w in caught] == [(UserWarning, "a real problem"),
                                                              (DeprecationWarning, "old name")]


class Custom:
    def __init__(self, x: torch.Tensor) -> None:
        self.x = x

    def to(self, device: torch.device, non_blocking: bool = False) -> Custom:
        return Custom(self.x.to(device, non_blocking=non_blocking))


def test_move_data_to_device_moves_tensors_and_objects_with_a_to() -> None:
    moved = move_data_to_device({"a": [torch.ones(1)], "b": Custom(torch.ones(2)), "c": "text"}, "meta")
    assert moved["a"][0].device.type == "meta" and moved["b"].x.device.type == "meta" and moved["c"] == "text"


def test_trainer_arguments_lightning_defaults_to_none_take_none_as_the_default(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)  # the default root folder is the working directory
    trainer = Trainer(default_root_dir=None, val_check_interval=None, log_every_n_steps=None, logger=False)
    default = Trainer(logger=False)
    assert os.path.abspath(trainer.default_root_dir) == os.path.abspath(default.default_root_dir) == str(tmp_path)
    assert (trainer.val_check_interval, trainer.log_every_n_steps) == (default.val_check_interval,
                                                                       default.log_every_n_steps) == (1.0, 50)
