"""ModelCheckpoint's Lightning-facing rules in real fits: ``.ckpt`` names, ``save_last`` off by default,
``save_on_exception``, ``enable_version_counter``, ``current_score``, a NaN score, and the set-ups it refuses."""

from __future__ import annotations

import math
import os

import pytest
import torch

from stoker import Trainer
from stoker.callbacks import ModelCheckpoint
from stoker.trainer.checkpointing import checkpoint_step
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor


def _names(path):
    return sorted(n for n in os.listdir(path) if not n.startswith("."))


class FailsAt(Regressor):
    def __init__(self, step: int) -> None:
        super().__init__()
        self.fail_step = step

    def training_step(self, batch, batch_idx):
        if self.global_step == self.fail_step:
            raise RuntimeError(f"boom at step {self.global_step}")
        return super().training_step(batch, batch_idx)


def test_default_names_end_in_ckpt_and_no_last_unless_asked(tmp_path):
    cb = ModelCheckpoint(dirpath=tmp_path / "a", save_top_k=-1)
    trainer(tmp_path, max_epochs=2, callbacks=[cb]).fit(Regressor(), *loaders())
    assert _names(tmp_path / "a") == ["epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt"]
    assert cb.last_model_path == "" and cb.best_model_path == str(tmp_path / "a" / "epoch=1-step=8.ckpt")
    assert os.path.isdir(cb.best_model_path)  # still a save_state folder, under Lightning's name

    cb = ModelCheckpoint(dirpath=tmp_path / "b", save_last=True)
    trainer(tmp_path, max_epochs=2, callbacks=[cb]).fit(Regressor(), *loaders())
    assert _names(tmp_path / "b") == ["epoch=1-step=8.ckpt", "last.ckpt"]
    assert cb.last_model_path == str(tmp_path / "b" / "last.ckpt") and checkpoint_step(cb.last_model_path) == 8


def test_class_attributes_rename_last_and_the_extension(tmp_path, monkeypatch):
    monkeypatch.setattr(ModelCheckpoint, "CHECKPOINT_NAME_LAST", "{epoch}-last")
    monkeypatch.setattr(ModelCheckpoint, "FILE_EXTENSION", ".state")
    cb = ModelCheckpoint(dirpath=tmp_path / "c", save_last="link")
    trainer(tmp_path, max_epochs=1, callbacks=[cb]).fit(Regressor(), *loaders())
    assert _names(tmp_path / "c") == ["epoch=0-last.state", "epoch=0-step=4.state"]


def test_fit_last_resumes_from_last_ckpt(tmp_path):
    cb = ModelCheckpoint(save_last=True, every_n_epochs=1)
    trainer(tmp_path, max_epochs=1, callbacks=[cb]).fit(Regressor(), *loaders())
    again = trainer(tmp_path, max_epochs=2, callbacks=[ModelCheckpoint(save_last=True)])
    assert again.find_last_checkpoint() == str(tmp_path / "checkpoints" / "last.ckpt")
    again.fit(Regressor(), *loaders(), ckpt_path="last")
    assert again.global_step == 8


def test_version_counter_or_replacement(tmp_path):
    for _ in range(2):
        trainer(tmp_path, max_epochs=1, callbacks=[ModelCheckpoint(dirpath=tmp_path / "v", filename="m")]).fit(
            Regressor(), *loaders())
    assert _names(tmp_path / "v") == ["m-v1.ckpt", "m.ckpt"]
    for _ in range(2):
        cb = ModelCheckpoint(dirpath=tmp_path / "r", filename="m", enable_version_counter=False)
        trainer(tmp_path, max_epochs=1, callbacks=[cb]).fit(Regressor(), *loaders())
    assert _names(tmp_path / "r") == ["m.ckpt"]


def test_save_on_exception_writes_the_state_at_the_failure(tmp_path):
    cb = ModelCheckpoint(dirpath=tmp_path / "x", filename="crash-{step}", save_on_exception=True, every_n_epochs=7)
    with pytest.raises(RuntimeError, match="boom at step 5"):
        trainer(tmp_path, max_epochs=3, callbacks=[cb]).fit(FailsAt(5), *loaders())
    assert _names(tmp_path / "x") == ["crash-step=5.ckpt"]
    assert checkpoint_step(str(tmp_path / "x" / "crash-step=5.ckpt")) == 5


def test_save_on_exception_skips_a_step_already_saved_and_the_default_is_off(tmp_path):
    cb = ModelCheckpoint(dirpath=tmp_path / "s", filename="{step}", save_on_exception=True, every_n_train_steps=5)
    with pytest.raises(RuntimeError):
        trainer(tmp_path, max_epochs=3, callbacks=[cb]).fit(FailsAt(5), *loaders())
    assert _names(tmp_path / "s") == ["step=5.ckpt"]  # saved by the step trigger; not written twice
    cb = ModelCheckpoint(dirpath=tmp_path / "off", every_n_epochs=7)
    with pytest.raises(RuntimeError):
        trainer(tmp_path, max_epochs=3, callbacks=[cb]).fit(FailsAt(5), *loaders())
    assert not os.path.exists(tmp_path / "off") or _names(tmp_path / "off") == []


class LogsScore(Regressor):
    def __init__(self, value: float) -> None:
        super().__init__()
        self.value = value

    def validation_step(self, batch, batch_idx):
        self.log("score", torch.tensor(self.value))
        return super().validation_step(batch, batch_idx)


@pytest.mark.parametrize("mode, worst", [("min", math.inf), ("max", -math.inf)])
def test_current_score_and_a_nan_score_counts_as_the_worst(tmp_path, mode, worst):
    cb = ModelCheckpoint(dirpath=tmp_path, monitor="score", mode=mode)
    assert cb.current_score is None
    trainer(tmp_path, max_epochs=1, callbacks=[cb]).fit(LogsScore(math.nan), *loaders())
    assert cb.current_score == worst and cb.best_model_score == worst
    cb = ModelCheckpoint(dirpath=tmp_path / "ok", monitor="score", mode=mode)
    trainer(tmp_path, max_epochs=1, callbacks=[cb]).fit(LogsScore(0.25), *loaders())
    assert cb.current_score == pytest.approx(0.25)


def test_invalid_set_ups_are_refused(tmp_path):
    with pytest.raises(ValueError, match=r"save_top_k=3, monitor=None\) is not a valid configuration"):
        ModelCheckpoint(save_top_k=3)
    for k in (-1, 0, 1):
        ModelCheckpoint(save_top_k=k)
    with pytest.raises(ValueError, match=r"save_top_k=-3\) is invalid. Must be >= -1"):
        ModelCheckpoint(save_top_k=-3, monitor="x")
    with pytest.raises(ValueError, match=r"save_last='always'"):
        ModelCheckpoint(save_last="always")
    with pytest.raises(ValueError, match=r"enable_checkpointing=False\) but found a ModelCheckpoint"):
        Trainer(enable_checkpointing=False, callbacks=[ModelCheckpoint()], default_root_dir=str(tmp_path))
    # Lightning's fast_dev_run keeps a user's ModelCheckpoint (inert) instead of refusing it
    cb = ModelCheckpoint(dirpath=tmp_path / "fdr")
    t = Trainer(fast_dev_run=2, callbacks=[cb], default_root_dir=str(tmp_path), enable_progress_bar=False)
    t.fit(Regressor(), *loaders())
    assert t.checkpoint_callback is cb and not os.path.exists(tmp_path / "fdr" / "epoch=0-step=2.ckpt")
