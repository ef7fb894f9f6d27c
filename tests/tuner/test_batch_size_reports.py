"""What Tuner.scale_batch_size tells as it searches: a log line per size it moves on to, one when a size already
holds the whole dataset, and a warning when the module keeps the batch size both as an attribute and in hparams."""

from __future__ import annotations

import inspect
import logging
from typing import Any

import pytest
import torch

from stoker.tuner import Tuner
from stoker.tuner.finders import BatchSizeFinder
from tests.helpers.trainers import quiet_trainer
from tests.tuner.test_batch_size import Sized

LOGGER = "stoker.tuner.batch_size_scaling"


def _search(caplog: pytest.LogCaptureFixture, module: Sized, **kwargs: Any) -> tuple[int | None, list[str]]:
    with caplog.at_level(logging.INFO, logger=LOGGER):
        size = Tuner(quiet_trainer(max_epochs=1)).scale_batch_size(module, steps_per_trial=1, **kwargs)
    return size, [r.getMessage() for r in caplog.records if r.name == LOGGER]


@pytest.mark.parametrize("mode", ["power", "binsearch"])
def test_each_size_the_search_moves_on_to_is_announced_once(caplog: pytest.LogCaptureFixture, mode: str) -> None:
    module = Sized(fits=1000, n=256)
    _, lines = _search(caplog, module, mode=mode, init_val=4, max_trials=3)
    tried = [line for line in lines if "trying batch size" in line]
    assert tried == ["scale_batch_size: trying batch size 8.", "scale_batch_size: trying batch size 16."]
    assert sum("fits" in line for line in lines) == 3  # each trial's outcome: 4, 8 and 16 fitted
    assert not any("whole dataset" in line for line in lines)


def test_a_failed_size_is_reported_and_the_smaller_one_announced(caplog: pytest.LogCaptureFixture) -> None:
    _, lines = _search(caplog, Sized(fits=100, n=1000), init_val=500)
    assert "scale_batch_size: batch size 500 ran out of memory." in lines
    assert "scale_batch_size: trying batch size 250." in lines


def test_a_size_that_holds_the_whole_dataset_is_said_once_and_ends_the_growth(caplog: pytest.LogCaptureFixture
                                                                              ) -> None:
    size, lines = _search(caplog, Sized(n=64), init_val=64, max_trials=5)
    assert size == 64
    assert [line for line in lines if "whole dataset" in line] == [
        "The batch size 64 is greater or equal than the length of your dataset: 64. (scale_batch_size: it already "
        "holds the whole dataset; no larger size is tried.)"]
    assert not any("trying batch size" in line for line in lines)  # nothing tried after the first size


def test_a_batch_size_in_both_attribute_and_hparams_warns_and_both_get_the_size() -> None:
    class Twice(Sized):
        def __init__(self, batch_size: int = 2) -> None:
            super().__init__(batch_size=batch_size, fits=16)
            self.save_hyperparameters("batch_size")

    module = Twice()
    with pytest.warns(UserWarning, match=r"Twice has both `batch_size` as an attribute and hparams\['batch_size'\]"):
        size = Tuner(quiet_trainer(max_epochs=1)).scale_batch_size(module, steps_per_trial=1)
    assert size == module.batch_size == module.hparams.batch_size == 16


def test_a_batch_size_only_in_hparams_does_not_warn(recwarn: pytest.WarningsRecorder) -> None:
    class OnlyHparams(Sized):
        def __init__(self, batch_size: int = 2) -> None:
            super().__init__(batch_size=None, fits=16)
            self.save_hyperparameters("batch_size")

        def train_dataloader(self) -> Any:
            return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 4), torch.randn(64, 1)),
                                               batch_size=self.hparams.batch_size)

        val_dataloader = train_dataloader

    assert Tuner(quiet_trainer(max_epochs=1)).scale_batch_size(OnlyHparams(), steps_per_trial=1) == 16
    assert not [w for w in recwarn if "has both" in str(w.message)]


def test_max_val_defaults_to_8192_and_its_cap_is_said(caplog: pytest.LogCaptureFixture) -> None:
    for fn in (Tuner.scale_batch_size, BatchSizeFinder.__init__):
        assert inspect.signature(fn).parameters["max_val"].default == 8192
    size, lines = _search(caplog, Sized(n=256), init_val=4, max_val=12)
    assert size == 12
    assert "scale_batch_size: trying batch size 12." in lines
    assert "scale_batch_size: batch size 12 reaches max_val=12; no larger size is tried." in lines


def test_max_val_none_leaves_only_the_dataset_length_as_limit(caplog: pytest.LogCaptureFixture) -> None:
    size, lines = _search(caplog, Sized(n=40), init_val=16, max_val=None)
    assert size == 40 and not any("max_val" in line for line in lines)


def test_the_twice_held_batch_size_warning_begins_with_lightnings_sentence() -> None:
    class Twice(Sized):
        def __init__(self, batch_size: int = 2) -> None:
            super().__init__(batch_size=batch_size, fits=16)
            self.save_hyperparameters("batch_size")

    with pytest.warns(UserWarning) as seen:
        Tuner(quiet_trainer(max_epochs=1)).scale_batch_size(Twice(), steps_per_trial=1)
    (message,) = [str(w.message) for w in seen if "mutually exclusive" in str(w.message)]
    assert message.startswith("Field `model.batch_size` and `model.hparams.batch_size` are mutually exclusive! "
                              "scale_batch_size: Twice has both")
