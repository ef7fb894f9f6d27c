"""The per-epoch checkpoint off the training thread (issue 15, item 3), with its guarantees kept.

``ModelCheckpoint``'s saves write their files on the training thread and commit them (fsyncs, the rename into
place, ``last``, evictions) on the Accelerator's saver thread; the folders still appear complete or not at all,
``fit`` returns only once they are committed, and no checkpoint is written after an unchecked non-finite loss.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Any

import pytest

from stoker import ModelCheckpoint, Trainer
from stoker.accelerator.checkpointing import checkpoint
from stoker.accelerator.checkpointing.checkpoint import verify_checkpoint
from stoker.trainer.checkpointing import checkpoint_step
from tests.helpers.models import make_loader, make_regression_data
from tests.helpers.models import Regressor

DATA = make_regression_data(n=32)  # 4 batches of 8


def fit(root: Path, callback: ModelCheckpoint, module: Any = None, epochs: int = 3) -> Trainer:
    trainer = Trainer(max_epochs=epochs, logger=False, enable_progress_bar=False, enable_model_summary=False,
                      default_root_dir=str(root), callbacks=[callback])
    trainer.fit(module or Regressor(), make_loader(DATA))
    return trainer


@pytest.fixture
def commit_threads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the threads that committed checkpoints (fsyncs and rename), in order."""
    names: list[str] = []
    real_commit = checkpoint._commit

    def recording_commit(*args: Any) -> None:
        names.append(threading.current_thread().name)
        real_commit(*args)

    monkeypatch.setattr(checkpoint, "_commit", recording_commit)
    return names


def test_default_epoch_checkpoints_commit_on_the_saver_thread_and_fit_waits(tmp_path: Path,
                                                                            commit_threads: list[str]) -> None:
    callback = ModelCheckpoint(save_last=True)
    fit(tmp_path, callback)
    assert len(commit_threads) == 3 and all(n.startswith("stoker-save") for n in commit_threads), commit_threads
    # fit returned: every commit, `last` and every eviction are done; nothing half-written or pending is left.
    ckpts = tmp_path / "checkpoints"
    assert sorted(os.listdir(ckpts)) == ["epoch=2-step=12.ckpt", "last.ckpt"]
    for name in os.listdir(ckpts):
        verify_checkpoint(ckpts / name)
    assert checkpoint_step(str(ckpts / "last.ckpt")) == 12
    assert callback.best_model_path == str(ckpts / "epoch=2-step=12.ckpt")


def test_weights_only_checkpoints_stay_synchronous(tmp_path: Path, commit_threads: list[str]) -> None:
    fit(tmp_path, ModelCheckpoint(save_weights_only=True, save_last=True), epochs=1)
    assert commit_threads == []  # not a save_state folder: written by save_model on the training thread
    assert sorted(os.listdir(tmp_path / "checkpoints")) == ["epoch=0-step=4.ckpt", "last.ckpt"]


class NanAt(Regressor):
    def __init__(self, step: int) -> None:
        super().__init__()
        self.bad_step = step

    def training_step(self, batch: Any, batch_idx: int) -> Any:
        loss = super().training_step(batch, batch_idx)
        return loss * float("nan") if self.trainer.global_step == self.bad_step else loss


@pytest.mark.parametrize("async_save", [False, True])
def test_no_background_checkpoint_is_written_after_a_nan_loss(tmp_path: Path, async_save: bool) -> None:
    callback = ModelCheckpoint(every_n_train_steps=1, save_top_k=-1, async_save=async_save, save_last=True)
    with pytest.raises(ValueError, match=r"global_step 2 \(epoch 0, batch_idx 2\) was not finite"):
        fit(tmp_path, callback, NanAt(step=2))
    # Steps 1 and 2 were saved before the NaN loss (computed for step 3); step 3's save found it first.
    assert sorted(os.listdir(tmp_path / "checkpoints")) == [
        "epoch=0-step=1.ckpt", "epoch=0-step=2.ckpt", "last.ckpt"]
    assert checkpoint_step(str(tmp_path / "checkpoints" / "last.ckpt")) == 2
