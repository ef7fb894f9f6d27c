"""What a Lightning user reads off the Trainer when a run starts from ``ckpt_path``: a fit resumed from the checkpoint
of an epoch's end starts at the next epoch, with the optimizer and schedulers as the first run left them; the
evaluation stages only take the weights."""

from __future__ import annotations

import copy
import os
from typing import Any

import torch

from stoker import Trainer
from stoker.callbacks import ModelCheckpoint
from tests.helpers.models import Regressor, make_loader, make_regression_data
from tests.helpers.weights import assert_same_weights


class Seen(Regressor):
    """Records ``(hook, current_epoch, global_step)`` and, at the start of training, the optimizer's and the
    scheduler's states."""

    def __init__(self, **kw: Any) -> None:
        super().__init__(scheduler="epoch", **kw)
        self.seen: list[tuple[str, int, int]] = []
        self.states: tuple[Any, Any] | None = None

    def _note(self, hook: str) -> None:
        self.seen.append((hook, self.trainer.current_epoch, self.trainer.global_step))

    def on_train_start(self) -> None:
        self._note("train")
        self.states = copy.deepcopy((self.trainer.optimizers[0].state_dict(),  # live tensors: copied
                                     self.trainer.lr_scheduler_configs[0].scheduler.state_dict()))

    def on_validation_start(self) -> None:
        self._note("validate")

    def on_test_start(self) -> None:
        self._note("test")


def trainer(tmp_path: Any, max_epochs: int, **kw: Any) -> Trainer:
    return Trainer(default_root_dir=tmp_path, max_epochs=max_epochs, limit_train_batches=2, limit_val_batches=2,
                   num_sanity_val_steps=0, logger=False, enable_progress_bar=False, enable_model_summary=False, **kw)


def test_a_fit_resumed_from_an_epoch_end_starts_at_the_next_epoch(tmp_path: Any) -> None:
    loader = make_loader(make_regression_data(n=32))
    first = trainer(tmp_path, 1, callbacks=[ModelCheckpoint(dirpath=tmp_path, save_last=True)])
    trained = Seen(seed=3)
    first.fit(trained, loader, loader)
    saved_optimizer = first.optimizers[0].state_dict()
    saved_scheduler = first.lr_scheduler_configs[0].scheduler.state_dict()  # stepped at the end of epoch 0
    path = os.path.join(tmp_path, "last.ckpt")

    resumed = Seen(seed=9)
    trainer(tmp_path, 3, enable_checkpointing=False).fit(resumed, loader, loader, ckpt_path=path)
    assert resumed.seen[0] == ("train", 1, 2)  # as Lightning: epoch 0 ended in the checkpoint, 2 steps done
    assert [s for s in resumed.seen if s[0] == "validate"] == [("validate", 1, 4), ("validate", 2, 6)]
    optimizer, scheduler = resumed.states
    assert scheduler == saved_scheduler and scheduler["last_epoch"] == 1
    for key, value in saved_optimizer["state"].items():
        assert torch.equal(optimizer["state"][key]["momentum_buffer"], value["momentum_buffer"])


def test_evaluating_from_a_checkpoint_takes_its_weights_not_its_counters(tmp_path: Any) -> None:
    loader = make_loader(make_regression_data(n=32))
    first = trainer(tmp_path, 2, callbacks=[ModelCheckpoint(dirpath=tmp_path, save_last=True)])
    trained = Seen(seed=3)
    first.fit(trained, loader, loader)
    path = os.path.join(tmp_path, "last.ckpt")
    for stage in ("validate", "test"):
        fresh = Seen(seed=9)
        getattr(trainer(tmp_path, 2, enable_checkpointing=False), stage)(fresh, loader, ckpt_path=path)
        assert fresh.seen == [(stage, 0, 0)]  # a new Trainer's counters, as in Lightning
        assert_same_weights(fresh, trained)
