"""A ``CombinedLoader`` of a non-sequential mode given to an evaluation: the batch counts list each of its iterables
(``num_val_batches`` / ``num_test_batches``, as Lightning counts them), while the stage runs, and the progress bar
and the sanity check count, the combined batches (``trainer.stage_record.loader_batches``); a batch limit applies to
each iterable on its own (in the max_size modes it sets the combined length only)."""

from __future__ import annotations

from typing import Any

import pytest

from stoker import BasePredictionWriter, Callback
from stoker.trainer.iterables import CombinedLoader
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.trainers import quiet_trainer


class Recorder(Regressor):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[bool, Any]] = []

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.seen.append((self.trainer.sanity_checking, batch))

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self.seen.append((False, batch))


@pytest.mark.parametrize("fn", ["validate", "test"])
@pytest.mark.parametrize("mode, runs", [("min_size", 2), ("max_size", 3), ("max_size_cycle", 3)])
def test_counts_name_each_iterable_and_the_stage_runs_the_combined_batches(fn, mode, runs):
    module, trainer = Recorder(), quiet_trainer()
    getattr(trainer, fn)(module, CombinedLoader({"a": [10, 11, 12], "b": [20, 21]}, mode))
    assert (trainer.num_val_batches if fn == "validate" else trainer.num_test_batches) == [3, 2]
    assert len(module.seen) == runs and trainer.stage_record.loader_batches[fn] == [runs]


def test_a_fractional_limit_cuts_each_iterable_by_its_own_length():
    module, trainer = Recorder(), quiet_trainer(limit_test_batches=0.5)
    trainer.test(module, CombinedLoader({"a": list(range(6)), "b": [100, 101]}, "max_size_cycle"))
    assert trainer.num_test_batches == [3, 1]  # half of 6, half of 2
    # the limits set the combined length (3); the short iterable restarts where its data ends, not at its limit
    assert [batch for _, batch in module.seen] == [{"a": 0, "b": 100}, {"a": 1, "b": 101}, {"a": 2, "b": 100}]


def test_the_progress_bar_total_is_the_batches_that_run():
    totals: list[int | float] = []

    class Peek(Callback):
        def on_test_batch_end(self, trainer: Any, module: Any, *args: Any) -> None:
            totals.append(trainer.progress_bar_callback.total_test_batches)

    trainer = quiet_trainer(enable_progress_bar=True, callbacks=[Peek()])
    trainer.test(Recorder(), CombinedLoader({"a": [0, 1, 2], "b": [5, 6]}, "min_size"))
    assert totals == [2, 2] and trainer.num_test_batches == [3, 2]


def test_the_sanity_check_runs_its_steps_of_the_combined_batches():
    module, trainer = Recorder(), quiet_trainer(max_epochs=1, num_sanity_val_steps=2)
    trainer.fit(module, make_loader(make_regression_data(n=16), 8),
                CombinedLoader({"a": [0, 1, 2], "b": [5, 6]}, "max_size"))
    assert [sanity for sanity, _ in module.seen] == [True, True, False, False, False]
    assert trainer.num_val_batches == [3, 2] and trainer.num_sanity_val_batches == [2, 2]


def test_a_writer_at_the_epoch_end_gets_a_combined_predict_loader_as_one_loader():
    written: list[Any] = []

    class Writer(BasePredictionWriter):
        def write_on_epoch_end(self, trainer: Any, module: Any, predictions: Any, batch_indices: Any) -> None:
            written.append(predictions)

    class Echo(Regressor):
        def predict_step(self, batch: Any, batch_idx: int) -> Any:
            return batch

    trainer = quiet_trainer(callbacks=[Writer("epoch")])
    returned = trainer.predict(Echo(), CombinedLoader({"a": [1, 2], "b": [3]}, "max_size"))
    assert trainer.num_predict_batches == [2, 1] and written == [returned]
    assert returned == [{"a": 1, "b": 3}, {"a": 2, "b": None}]
