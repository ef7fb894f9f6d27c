"""Loaders that are not DataLoaders: ``CombinedLoader``'s modes, several train loaders read together, and any
iterable of batches (fp32 weights equal to the same batches from a DataLoader)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch.nn import functional as F

from stoker.trainer.iterables import CombinedLoader
from tests.helpers.models import Regressor, batches, make_loader, make_regression_data
from tests.helpers.trainers import quiet_trainer
from tests.helpers.weights import assert_same_weights, state_of


@pytest.mark.parametrize("mode, want", [
    ("min_size", [{"a": 0, "b": [0, 0]}]),
    ("max_size_cycle", [{"a": 0, "b": [0, 0]}, {"a": 1, "b": [1, 0]}, {"a": 2, "b": [0, 0]}]),
    ("max_size", [{"a": 0, "b": [0, 0]}, {"a": 1, "b": [1, None]}, {"a": 2, "b": [None, None]}]),
])
def test_combined_modes(mode, want):
    combined = CombinedLoader({"a": range(3), "b": [range(2), range(1)]}, mode)
    assert list(combined.batches()) == want and len(combined) == len(want)
    assert [idx for _, idx, _ in combined] == list(range(len(want)))


def test_combined_sequential_and_bad_mode():
    combined = CombinedLoader([range(2), range(3)], "sequential")
    assert list(combined) == [(0, 0, 0), (1, 1, 0), (0, 0, 1), (1, 1, 1), (2, 2, 1)] and len(combined) == 5
    with pytest.raises(ValueError, match=r"CombinedLoader\(mode='zip'\) is not a mode. Expected one of: min_size"):
        CombinedLoader([], "zip")


class Batches:
    """An iterable of batches that is not a DataLoader, whose length is unknown (as a stream's)."""

    def __init__(self, items: list[Any]) -> None:
        self.items = items

    def __iter__(self) -> Any:
        return iter(self.items)

    def __len__(self) -> int:
        raise NotImplementedError


def test_any_iterable_trains_like_the_same_batches_from_a_dataloader():
    data = make_regression_data(n=40)
    plain = quiet_trainer(max_epochs=2)
    reference = Regressor(momentum=0.0)
    plain.fit(reference, make_loader(data, batch_size=8))
    custom = quiet_trainer(max_epochs=2)
    module = Regressor(momentum=0.0)
    custom.fit(module, Batches(batches(data, 8)), Batches(batches(data, 8)))
    assert_same_weights(state_of(module), state_of(reference))
    assert custom.global_step == 10 and custom.num_training_batches == float("inf")
    limited = quiet_trainer(max_epochs=1, limit_train_batches=3)
    limited.fit(Regressor(), Batches(batches(data, 8)))
    assert limited.global_step == 3


class TwoLoaders(Regressor):
    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        (xa, ya), (xb, yb) = batch["a"], batch["b"]
        return F.mse_loss(self(xa), ya) + F.mse_loss(self(xb), yb)


def test_several_train_loaders_are_read_together():
    long, short = make_loader(make_regression_data(n=32), 8), make_loader(make_regression_data(n=16, seed=1), 8)
    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(TwoLoaders(), {"a": long, "b": short})  # max_size_cycle: as long as the longest
    assert trainer.num_training_batches == 4 and trainer.global_step == 4
    trainer = quiet_trainer(max_epochs=1)
    trainer.fit(TwoLoaders(), CombinedLoader({"a": long, "b": short}, "min_size"))
    assert trainer.num_training_batches == 2
    with pytest.raises(ValueError, match="CombinedLoader\\(mode='sequential'\\)"):
        quiet_trainer(max_epochs=1).fit(TwoLoaders(), CombinedLoader({"a": long, "b": short}, "sequential"))


class CountsLoaders(Regressor):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[int] = []

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.seen.append(dataloader_idx)


def test_evaluation_reads_a_combined_loader_one_loader_after_the_other():
    module = CountsLoaders()
    loaders = CombinedLoader([make_loader(make_regression_data(n=16), 8), make_loader(make_regression_data(n=8), 8)],
                             "sequential")
    quiet_trainer().validate(module, loaders)
    assert module.seen == [0, 0, 1]


class SizedBatches(Batches):
    def __len__(self) -> int:
        return len(self.items)


def test_an_iterable_closes_the_accumulation_window_at_its_end():
    data = make_regression_data(n=40)  # 5 batches an epoch, windows of 3: 3 + a short one of 2
    reference, trainer = Regressor(), quiet_trainer(max_epochs=2, accumulate=3)
    trainer.fit(reference, make_loader(data, batch_size=8))
    sized, sized_trainer = Regressor(), quiet_trainer(max_epochs=2, accumulate=3)
    sized_trainer.fit(sized, SizedBatches(batches(data, 8)))
    assert trainer.global_step == sized_trainer.global_step == 4
    assert_same_weights(state_of(sized), state_of(reference))  # the short window averaged over its 2 batches
    unsized = quiet_trainer(max_epochs=2, accumulate=3)
    unsized.fit(Regressor(), Batches(batches(data, 8)))
    assert unsized.global_step == 4  # closed at the end too (averaged over 3: the length is unknown)


@pytest.mark.parametrize("mode, expected", [
    ("min_size", [(8, 8)]),
    ("max_size_cycle", [(8, 8), (8, 8)]),
    ("max_size", [(8, 8), (8, None)]),
])
def test_evaluation_reads_a_combined_loader_of_another_mode_as_one_loader_of_combined_batches(mode, expected):
    class Pairs(Regressor):
        def __init__(self) -> None:
            super().__init__()
            self.sizes: list[tuple[int, int | None]] = []

        def test_step(self, batch: Any, batch_idx: int) -> None:  # no dataloader_idx: one loader
            self.sizes.append((len(batch["a"][0]), None if batch["b"] is None else len(batch["b"][0])))

    module = Pairs()
    combined = CombinedLoader({"a": make_loader(make_regression_data(n=16), 8),
                               "b": make_loader(make_regression_data(n=8), 8)}, mode)
    trainer = quiet_trainer()
    trainer.test(module, combined)
    # the batches that ran: the combined count; Lightning's num_test_batches lists each iterable's own
    assert module.sizes == expected and trainer.stage_record.loader_batches["test"] == [len(expected)]
    assert trainer.num_test_batches == [2, 1]
