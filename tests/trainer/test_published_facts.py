"""The facts the Trainer publishes for callbacks: ``fitting``, ``window_closed``, ``epoch_finished`` and
``validation_count``, each read by a callback over a real fit (accumulate=2, a stop in the middle of an epoch,
validation at every epoch's end, a sanity check, a resumed epoch end)."""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.utils.data import DataLoader, IterableDataset

from stoker import Callback, Trainer
from tests.helpers.models import IN_FEATURES, OUT_FEATURES, Regressor, make_loader, make_regression_data
from tests.helpers.trainers import quiet_trainer


bare = functools.partial(quiet_trainer, enable_model_summary=False)  # a quiet Trainer that prints no summary


class Facts(Callback):
    """Records the published facts at the hooks where callbacks read them."""

    def __init__(self, stop_at: tuple[int, int] | None = None) -> None:
        self.stop_at = stop_at  # (epoch, batch_idx) where should_stop is set
        self.seen: list[tuple] = []

    def setup(self, trainer: Trainer, module: Any, stage: str) -> None:
        self.seen.append(("setup", stage, trainer.fitting))

    def on_train_batch_start(self, trainer: Trainer, module: Any, batch: Any, batch_idx: int) -> None:
        self.seen.append(("start", trainer.current_epoch, batch_idx, trainer.window_closed))

    def on_train_batch_end(self, trainer: Trainer, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        self.seen.append(("end", trainer.current_epoch, batch_idx, trainer.window_closed))
        if self.stop_at == (trainer.current_epoch, batch_idx):
            trainer.should_stop = True

    def on_validation_end(self, trainer: Trainer, module: Any) -> None:
        self.seen.append(("val", trainer.current_epoch, trainer.validation_count, trainer.sanity_checking,
                          trainer.fitting))

    def on_train_epoch_end(self, trainer: Trainer, module: Any) -> None:
        self.seen.append(("epoch_end", trainer.current_epoch, trainer.epoch_finished, trainer.window_closed))


def fit(facts: Facts, n: int = 56, **kwargs: Any) -> Trainer:
    trainer = bare(callbacks=[facts], accumulate=2, **kwargs)
    trainer.fit(Regressor(), make_loader(make_regression_data(n=n), batch_size=8),
                make_loader(make_regression_data(n=16), batch_size=8))
    return trainer


def test_window_closed_is_true_from_the_closing_batch_until_the_next_batch_starts() -> None:
    facts = Facts()
    fit(facts, max_epochs=1)  # 7 batches, windows of 2: [0, 1] [2, 3] [4, 5] [6]
    ends = [closed for kind, _, _, closed in (s for s in facts.seen if s[0] == "end")]
    assert ends == [False, True, False, True, False, True, True]
    assert all(not s[3] for s in facts.seen if s[0] == "start")  # a new batch has closed nothing yet
    assert ("epoch_end", 0, True, True) in facts.seen


def test_a_stop_in_the_middle_of_an_epoch_is_not_a_finished_epoch() -> None:
    facts = Facts(stop_at=(1, 2))  # set inside the window [2, 3]: the stop waits for batch 3's optimizer step
    trainer = fit(facts, max_epochs=3, num_sanity_val_steps=1)
    epoch_ends = [s for s in facts.seen if s[0] == "epoch_end"]
    assert epoch_ends == [("epoch_end", 0, True, True), ("epoch_end", 1, False, True)]
    assert [s[2] for s in facts.seen if s[0] == "end" and s[1] == 1] == [0, 1, 2, 3]
    # Validation at every epoch's end (not the stopped one); the sanity check counts nothing.
    vals = [s for s in facts.seen if s[0] == "val"]
    assert vals == [("val", 0, 0, True, True), ("val", 0, 1, False, True)]
    assert trainer.validation_count == 1 and trainer.global_step == 4 + 2


def test_max_steps_in_the_middle_of_an_epoch_is_not_a_finished_epoch() -> None:
    facts = Facts()
    trainer = fit(facts, max_steps=2)  # two windows of the first epoch's four
    assert [s for s in facts.seen if s[0] == "epoch_end"] == [("epoch_end", 0, False, True)]
    assert trainer.validation_count == 0 and not trainer.epoch_finished


def test_fitting_is_true_only_inside_fit_and_validation_count_restarts_with_each_fit() -> None:
    facts = Facts()
    trainer = fit(facts, max_epochs=2, num_sanity_val_steps=0)
    assert [s[2] for s in facts.seen if s[0] == "val"] == [1, 2]
    assert ("setup", "fit", True) in facts.seen and not trainer.fitting
    trainer.validate(dataloaders=make_loader(make_regression_data(n=16), batch_size=8))
    assert ("setup", "validate", False) in facts.seen
    assert facts.seen[-1] == ("val", 2, 2, False, False)  # validate() is not a fit's validation
    assert trainer.validation_count == 2
    facts.seen.clear()
    trainer.max_epochs = 3
    trainer.fit(trainer.module, make_loader(make_regression_data(n=56), batch_size=8),
                make_loader(make_regression_data(n=16), batch_size=8))
    assert [s for s in facts.seen if s[0] == "val"] == [("val", 2, 1, False, True)]


class Endless(IterableDataset):
    def __iter__(self):  # noqa: ANN204 - a generator
        g = torch.Generator().manual_seed(0)
        for _ in range(10):
            yield torch.randn(IN_FEATURES, generator=g), torch.randn(OUT_FEATURES, generator=g)


def test_a_loader_of_unknown_length_counts_a_stopped_epoch_as_finished() -> None:
    facts = Facts(stop_at=(0, 3))
    trainer = bare(callbacks=[facts], accumulate=2, max_epochs=2)
    trainer.fit(Regressor(), DataLoader(Endless(), batch_size=2))
    assert [s for s in facts.seen if s[0] == "epoch_end"] == [("epoch_end", 0, True, True)]


class SaveAtEpochsLastBatch(Callback):
    def __init__(self, path: str) -> None:
        self.path = path

    def on_train_batch_end(self, trainer: Trainer, module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if batch_idx == 6:
            trainer.save_checkpoint(self.path)
            raise KeyboardInterrupt  # the run dies after its epoch's last batch, before the epoch's end


def test_an_epoch_completed_by_a_resume_is_finished(tmp_path: Any) -> None:
    path = str(tmp_path / "ckpt")
    try:
        fit(SaveAtEpochsLastBatch(path), max_epochs=1)
    except KeyboardInterrupt:
        pass
    facts = Facts()
    trainer = bare(callbacks=[facts], accumulate=2, max_epochs=1)
    trainer.fit(Regressor(), make_loader(make_regression_data(n=56), batch_size=8),
                make_loader(make_regression_data(n=16), batch_size=8), ckpt_path=path)
    assert not [s for s in facts.seen if s[0] in ("start", "end")]  # no batch left to run
    assert [s[:3] for s in facts.seen if s[0] == "epoch_end"] == [("epoch_end", 0, True)]
    assert [s[2] for s in facts.seen if s[0] == "val"] == [1]
