"""Lightning's ``trainer.validate_loop`` / ``test_loop`` / ``predict_loop``: views over what the Trainer records of
each stage's latest run (``max_batches``, ``predictions``, ``epoch_batch_indices``)."""

from __future__ import annotations

from typing import Any

import pytest

from stoker import BasePredictionWriter, Callback
from stoker.trainer.iterables import CombinedLoader
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.trainers import quiet_trainer


class Indexed(Regressor):
    def predict_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> int:
        return 10 * dataloader_idx + batch_idx


def test_predictions_are_what_the_latest_predict_returned():
    trainer, module, loader = quiet_trainer(), Indexed(), make_loader(make_regression_data(n=16), 8)
    returned = trainer.predict(module, loader)
    assert returned == [0, 1] and trainer.predict_loop.predictions == returned
    assert trainer.predict(module, [loader, loader]) == trainer.predict_loop.predictions == [[0, 1], [10, 11]]
    assert trainer.predict(module, loader, return_predictions=False) is None
    assert trainer.predict_loop.predictions == []  # nothing kept alive when nothing is returned


class Writer(BasePredictionWriter):
    def write_on_batch_end(self, *args: Any) -> None: ...

    def write_on_epoch_end(self, *args: Any) -> None: ...


@pytest.mark.parametrize("interval, during", [("epoch", [[[0, 1, 2, 3], [4, 5, 6, 7]]]), ("batch", [[]])])
def test_epoch_batch_indices_are_kept_for_a_writer_at_the_epoch_end(interval, during):
    seen: list[Any] = []

    class Peek(Callback):
        def on_predict_epoch_end(self, trainer: Any, module: Any) -> None:
            seen.append(trainer.predict_loop.epoch_batch_indices)

    trainer = quiet_trainer(callbacks=[Writer(interval), Peek()])
    trainer.predict(Indexed(), make_loader(make_regression_data(n=8), 4), return_predictions=False)
    assert seen == [during] and trainer.predict_loop.epoch_batch_indices == []


def test_evaluation_loops_give_the_per_iterable_counts():
    trainer, module = quiet_trainer(), Regressor()
    trainer.validate(module, make_loader(make_regression_data(n=24), 8))
    assert trainer.validate_loop.max_batches == trainer.num_val_batches == [3]

    class Quiet(Regressor):
        def test_step(self, batch: Any, batch_idx: int) -> None: ...

    trainer.test(Quiet(), CombinedLoader({"a": [1, 2, 3], "b": [4]}, "max_size"))
    assert trainer.test_loop.max_batches == [3, 1] and trainer.predict_loop.max_batches == []
