"""Each pass over a ``CombinedLoader`` of DataLoaders (a training epoch, a validation run) reads every loader from an
epoch's start, as a fresh ``iter()`` of each would: a loader that the pass left before its end (the longer one under
``"min_size"``, the restarted shorter one under ``"max_size_cycle"``, one cut by a batch limit) does not continue
where it was at the next pass, and a fit resumed from any of its checkpoints still ends as the uninterrupted one."""

from __future__ import annotations

import os
from typing import Any

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from stoker import ModelCheckpoint, TrainingModule
from stoker.trainer.iterables import CombinedLoader
from tests.helpers.trainers import quiet_trainer

ITEMS = torch.arange(40.0).unsqueeze(1)


def loader(n: int, shuffle: bool = False) -> DataLoader:
    """``n`` items numbered 0..n-1 (as inputs and targets), 4 to a batch."""
    return DataLoader(TensorDataset(ITEMS[:n], ITEMS[:n]), batch_size=4, shuffle=shuffle)


def combined(mode: str, shuffle: bool = False) -> CombinedLoader:
    return CombinedLoader({"a": loader(40, shuffle), "b": loader(24, shuffle)}, mode)


class Recorder(TrainingModule):
    """A linear model that records the first item of each loader's batch, with the epoch, in its steps."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.layer = torch.nn.Linear(1, 1)
        self.train_seen: list[tuple[int, int, int]] = []
        self.val_seen: list[tuple[int, int, int]] = []

    @staticmethod
    def firsts(batch: dict[str, Any]) -> tuple[int, int]:
        return int(batch["a"][0][0, 0]), int(batch["b"][0][0, 0])

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        self.train_seen.append((self.trainer.current_epoch, *self.firsts(batch)))
        return sum(torch.nn.functional.mse_loss(self.layer(x), y / 40) for x, y in batch.values())

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self.val_seen.append((self.trainer.current_epoch, *self.firsts(batch)))

    def configure_optimizers(self) -> Any:
        return torch.optim.SGD(self.parameters(), lr=0.001)


def by_epoch(seen: list[tuple[int, int, int]]) -> dict[int, list[tuple[int, int]]]:
    epochs: dict[int, list[tuple[int, int]]] = {}
    for epoch, a, b in seen:
        epochs.setdefault(epoch, []).append((a, b))
    return epochs


@pytest.mark.parametrize("mode, per_epoch", [("min_size", 6), ("max_size_cycle", 10)])
def test_every_training_epoch_reads_each_loader_from_its_start(mode, per_epoch):
    module = Recorder()
    quiet_trainer(max_epochs=3).fit(module, combined(mode))
    epochs = by_epoch(module.train_seen)
    assert sorted(epochs) == [0, 1, 2]
    assert epochs[0] == epochs[1] == epochs[2]  # unshuffled: the same batches in every epoch
    assert len(epochs[0]) == per_epoch and epochs[0][0] == (0, 0)


@pytest.mark.parametrize("limit", [None, 3])
def test_every_validation_reads_each_loader_from_its_start(limit):
    module = Recorder()
    trainer = quiet_trainer(max_epochs=2, limit_val_batches=limit, num_sanity_val_steps=0)
    trainer.fit(module, combined("min_size"), combined("min_size"))
    runs = by_epoch(module.val_seen)
    assert runs[0] == runs[1] == [(4 * i, 4 * i) for i in range(limit or 6)]


def fit(root: str, ckpt_path: str | None = None) -> tuple[Recorder, Any]:
    module = Recorder()
    save = ModelCheckpoint(dirpath=os.path.join(root, "ck"), filename="{step}", monitor=None, save_top_k=-1,
                           every_n_train_steps=3)
    trainer = quiet_trainer(default_root_dir=root, max_epochs=3, enable_checkpointing=True, callbacks=[save])
    torch.manual_seed(0)
    trainer.fit(module, combined("min_size", shuffle=True), ckpt_path=ckpt_path)
    trainer.accelerator.wait_for_checkpoints()
    return module, trainer


def test_a_fit_resumed_from_any_checkpoint_reads_the_same_batches(tmp_path):
    whole, trainer = fit(str(tmp_path / "whole"))
    assert trainer.global_step == 18  # 6 batches (the shorter loader's) in each of 3 epochs
    for step in (3, 6, 9, 12, 15):  # mid-epoch and at each epoch's last batch
        resumed, again = fit(str(tmp_path / f"r{step}"), str(tmp_path / "whole" / "ck" / f"step={step}.ckpt"))
        assert again.global_step == 18, step
        assert resumed.train_seen == whole.train_seen[step:], step
        assert all(torch.equal(a, b) for a, b in zip(whole.state_dict().values(), resumed.state_dict().values()))
