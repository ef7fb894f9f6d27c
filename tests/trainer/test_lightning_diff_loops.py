"""Loop settings in combination, as a Lightning script uses them: which batches run, and when a fit stops.

Each loader's items are their own indices (offset per loader), so a recorded batch says where it came from."""

from __future__ import annotations

from typing import Any

import torch
from torch.utils.data import DataLoader

from stoker import Callback, TrainingModule
from stoker.trainer.iterables import CombinedLoader
from tests.helpers.trainers import quiet_trainer


def indices(n: int, base: int = 0, batch_size: int = 2) -> DataLoader:
    """``n`` items ``base, base + 1, ...`` in batches of ``batch_size``, in order."""
    return DataLoader([torch.tensor([float(base + i)]) for i in range(n)], batch_size=batch_size)


def ids(batch: Any) -> Any:
    """A batch as the item indices it holds (the structure of a combined batch kept)."""
    if isinstance(batch, torch.Tensor):
        return [int(v) for v in batch.flatten().tolist()]
    if isinstance(batch, dict):
        return {key: ids(value) for key, value in batch.items()}
    return [ids(value) for value in batch]


def total(batch: Any) -> torch.Tensor:
    if isinstance(batch, torch.Tensor):
        return batch.sum()
    return sum(total(value) for value in (batch.values() if isinstance(batch, dict) else batch))


class Indexed(TrainingModule):
    """Records ``(stage, epoch, batch_idx, dataloader_idx, item indices)`` for every step."""

    def __init__(self) -> None:
        super().__init__()
        self.layer = torch.nn.Linear(1, 1)
        self.seen: list[tuple[str, int, int, int, Any]] = []

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        self.seen.append(("train", self.current_epoch, batch_idx, 0, ids(batch)))
        return self.layer(total(batch).reshape(1, 1) / 1000).pow(2).sum()

    def validation_step(self, batch: Any, batch_idx: int, dataloader_idx: int = 0) -> None:
        self.seen.append(("val", self.current_epoch, batch_idx, dataloader_idx, ids(batch)))

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return torch.optim.SGD(self.parameters(), lr=0.01)

    def steps(self, stage: str) -> list[tuple[int, int, int, Any]]:
        return [entry[1:] for entry in self.seen if entry[0] == stage]


def test_a_sanity_check_of_all_val_batches_keeps_the_val_batch_limit():
    module = Indexed()
    trainer = quiet_trainer(max_epochs=1, num_sanity_val_steps=-1, limit_val_batches=2, limit_train_batches=1)
    trainer.fit(module, indices(4), [indices(6, 100), indices(2, 200)])
    # sanity check, then the epoch's validation: each reads at most 2 batches of each loader
    reads = [(0, 0, [100, 101]), (1, 0, [102, 103]), (0, 1, [200, 201])]
    assert [step[1:] for step in module.steps("val")] == reads + reads


def test_a_fractional_train_limit_on_max_size_cycle_sets_the_length_and_reads_on_before_cycling():
    module = Indexed()
    loaders = CombinedLoader([indices(6), indices(10, 100)], "max_size_cycle")  # 3 and 5 batches
    trainer = quiet_trainer(max_epochs=2, limit_train_batches=0.6, limit_val_batches=0)
    trainer.fit(module, loaders)
    assert trainer.num_training_batches == 3  # the longest after its limit (0.6 * 5); the shorter one: 0.6 * 3 -> 1
    # the shorter iterable is not cut at its own limit: it gives its second and third batch, as Lightning's does
    epoch = [[[0, 1], [100, 101]], [[2, 3], [102, 103]], [[4, 5], [104, 105]]]
    assert [step[3] for step in module.steps("train")] == epoch + epoch


def test_a_fractional_train_limit_on_max_size_reads_each_iterable_on_within_the_length():
    module = Indexed()
    loaders = CombinedLoader({"a": indices(6), "b": indices(10, 100)}, "max_size")  # 3 and 5 batches
    trainer = quiet_trainer(max_epochs=1, limit_train_batches=0.4, limit_val_batches=0)
    trainer.fit(module, loaders)
    assert trainer.num_training_batches == 2  # 0.4 * 5; "a" alone would be cut at 0.4 * 3 -> 1
    assert [step[3] for step in module.steps("train")] == [{"a": [0, 1], "b": [100, 101]},
                                                           {"a": [2, 3], "b": [102, 103]}]


def test_should_stop_set_in_on_train_epoch_start_ends_the_fit_before_that_epochs_first_batch():
    calls: list[tuple[str, int, int]] = []

    class StopInSecondEpoch(Callback):
        def on_train_epoch_start(self, trainer, module):
            calls.append(("start", trainer.current_epoch, trainer.global_step))
            if trainer.current_epoch == 1:
                trainer.should_stop = True

        def on_train_epoch_end(self, trainer, module):
            calls.append(("end", trainer.current_epoch, trainer.global_step))

    module = Indexed()
    trainer = quiet_trainer(max_epochs=3, limit_val_batches=0, callbacks=[StopInSecondEpoch()])
    trainer.fit(module, indices(6))
    assert trainer.global_step == 3 and [step[0] for step in module.steps("train")] == [0, 0, 0]
    assert calls == [("start", 0, 0), ("end", 0, 3), ("start", 1, 3), ("end", 1, 3)]


def test_on_train_batch_start_returning_minus_one_ends_the_epoch_there_without_its_validation():
    class EndsFirstEpochEarly(Indexed):
        def on_train_batch_start(self, batch: Any, batch_idx: int) -> int | None:
            return -1 if (self.current_epoch, batch_idx) == (0, 2) else None

    ends: list[tuple[int, bool]] = []

    class LastBatch(Callback):
        def on_train_epoch_end(self, trainer, module):
            ends.append((trainer.global_step, trainer.is_last_batch))

    module = EndsFirstEpochEarly()
    trainer = quiet_trainer(max_epochs=2, limit_val_batches=1, callbacks=[LastBatch()], num_sanity_val_steps=0)
    trainer.fit(module, indices(10), indices(2, 100))
    trained = [(epoch, batch[0]) for epoch, _, _, batch in module.steps("train")]
    assert trained == [(0, 0), (0, 2)] + [(1, i) for i in range(0, 10, 2)]  # epoch 1 reads its loader from the start
    assert [epoch for epoch, *_ in module.steps("val")] == [1] and ends == [(2, True), (7, True)]


def test_an_epoch_ended_by_minus_one_still_steps_its_epoch_schedulers():
    class EndsEveryEpochEarly(Indexed):
        def configure_optimizers(self) -> Any:
            optimizer = torch.optim.SGD(self.parameters(), lr=0.1)
            return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.1)]

        def on_train_batch_start(self, batch: Any, batch_idx: int) -> int | None:
            return -1 if batch_idx == 2 else None

    module = EndsEveryEpochEarly()
    trainer = quiet_trainer(max_epochs=3, limit_val_batches=0)
    trainer.fit(module, indices(10))
    assert trainer.global_step == 6  # two steps per epoch, then the epoch ends at its third batch
    assert trainer.optimizers[0].param_groups[0]["lr"] == 0.1 * 0.1 ** 3  # one scheduler step per epoch, as its end
