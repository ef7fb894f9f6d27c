"""ModelCheckpoint's Lightning options in real fits: names without metric names, weights-only folders, saving after
validation instead of at the epoch's end, a wall-clock trigger, verbose."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest
import torch

from stoker import ModelCheckpoint, load_checkpoint_in_model
from stoker.callbacks import checkpoint as checkpoint_module
from stoker.trainer.checkpointing import checkpoint_step
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor
from tests.helpers.weights import params_of


def _folders(path) -> list[str]:
    return sorted(name for name in os.listdir(path) if not name.startswith("."))


def test_auto_insert_metric_name_off_writes_bare_values(tmp_path):
    ckpt = ModelCheckpoint(save_last=True, filename="e{epoch:02d}-s{step}-{val/score:.1f}",
                           auto_insert_metric_name=False,
                           save_top_k=-1)
    trainer(tmp_path, max_epochs=2, callbacks=[ckpt]).fit(Regressor(val_scores=[0.5, 0.25]), *loaders())
    assert _folders(tmp_path / "checkpoints") == ["e00-s4-0.5.ckpt", "e01-s8-0.2.ckpt", "last.ckpt"]
    with pytest.raises(ValueError, match="not a valid template"):
        ModelCheckpoint(filename="{epoch:q}", auto_insert_metric_name=False)


def test_save_weights_only_writes_loadable_weights_and_no_state(tmp_path):
    ckpt = ModelCheckpoint(save_last=True, monitor="val/score", save_weights_only=True, export_weights=True)
    t = trainer(tmp_path, max_epochs=2, callbacks=[ckpt])
    module = Regressor(val_scores=[0.5, 0.7])
    t.fit(module, *loaders())
    best, last = ckpt.best_model_path, ckpt.last_model_path
    assert os.path.basename(best) == "epoch=0-step=4.ckpt" and ckpt.export_weights is False
    assert _folders(tmp_path / "checkpoints") == ["epoch=0-step=4.ckpt", "last.ckpt"]  # no weights/ export beside them
    for folder in (best, last):
        # The weights and the hyperparameters load_from_checkpoint rebuilds the module from; no training state.
        assert _folders(folder) == ["hparams.json", "model.safetensors"] and checkpoint_step(folder) is None
    fresh = Regressor()
    load_checkpoint_in_model(fresh, last)
    for got, want in zip(params_of(fresh), params_of(module)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    assert t.find_last_checkpoint() is None  # not resumable, so never picked by ckpt_path="last"
    other = Regressor()
    t.validate(other, loaders()[1], ckpt_path=best)  # evaluation reads the weights
    assert not torch.equal(params_of(other)[0], params_of(module)[0])


def test_save_after_each_validation_instead_of_the_epoch_end(tmp_path):
    # Validation twice per epoch (every 2 of 4 batches).
    after_validation = ModelCheckpoint(save_last=True, save_top_k=-1, save_on_train_epoch_end=False)
    trainer(tmp_path / "a", max_epochs=2, val_check_interval=2, callbacks=[after_validation]).fit(
        Regressor(), *loaders())
    assert _folders(tmp_path / "a" / "checkpoints") == [
        "epoch=0-step=2.ckpt", "epoch=0-step=4.ckpt", "epoch=1-step=6.ckpt", "epoch=1-step=8.ckpt", "last.ckpt"]
    at_epoch_end = ModelCheckpoint(save_last=True, save_top_k=-1, save_on_train_epoch_end=True)
    trainer(tmp_path / "b", max_epochs=2, val_check_interval=2, callbacks=[at_epoch_end]).fit(
        Regressor(), *loaders())
    assert _folders(tmp_path / "b" / "checkpoints") == ["epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt", "last.ckpt"]
    every_other = ModelCheckpoint(save_last=True, save_top_k=-1, save_on_train_epoch_end=False, every_n_epochs=2)
    trainer(tmp_path / "c", max_epochs=2, val_check_interval=2, callbacks=[every_other]).fit(
        Regressor(), *loaders())
    assert _folders(tmp_path / "c" / "checkpoints") == ["epoch=1-step=6.ckpt", "epoch=1-step=8.ckpt", "last.ckpt"]


def test_save_after_validation_without_validation_keeps_only_last(tmp_path):
    ckpt = ModelCheckpoint(save_last=True, save_top_k=-1, save_on_train_epoch_end=False)
    trainer(tmp_path, max_epochs=2, callbacks=[ckpt]).fit(Regressor(), loaders()[0])
    assert _folders(tmp_path / "checkpoints") == ["last.ckpt"]
    assert checkpoint_step(str(tmp_path / "checkpoints" / "last.ckpt")) == 8


class _Clock:
    now = 1000.0

    def monotonic(self) -> float:
        return self.now


class Slow(Regressor):
    clock: _Clock

    def training_step(self, batch, batch_idx):
        self.clock.now += 0.4
        return super().training_step(batch, batch_idx)


def test_train_time_interval_saves_by_wall_clock(tmp_path, monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(checkpoint_module, "time", clock)
    Slow.clock = clock
    ckpt = ModelCheckpoint(save_last=True, save_top_k=-1, train_time_interval=timedelta(seconds=1))
    assert ckpt.every_n_epochs == 0 and "train_time_interval" in ckpt.state_key
    trainer(tmp_path / "a", max_epochs=2, callbacks=[ckpt]).fit(Slow(), *loaders())
    # 0.4 s per step: 1 s has passed after steps 3 and 6; `last` holds the end (step 8).
    assert _folders(tmp_path / "a" / "checkpoints") == ["epoch=0-step=3.ckpt", "epoch=1-step=6.ckpt", "last.ckpt"]
    both = ModelCheckpoint(save_last=True, save_top_k=-1, train_time_interval=timedelta(seconds=1), every_n_epochs=1)
    trainer(tmp_path / "b", max_epochs=1, callbacks=[both]).fit(Slow(), *loaders())
    assert _folders(tmp_path / "b" / "checkpoints") == ["epoch=0-step=3.ckpt", "epoch=0-step=4.ckpt", "last.ckpt"]


def test_a_zero_train_time_interval_saves_at_every_check(tmp_path):
    """``timedelta(0)`` (Lightning takes it): the wall-clock trigger fires after every optimizer step."""
    ckpt = ModelCheckpoint(save_top_k=-1, train_time_interval=timedelta(0))
    trainer(tmp_path, max_epochs=1, callbacks=[ckpt]).fit(Regressor(), *loaders())
    assert _folders(tmp_path / "checkpoints") == [f"epoch=0-step={n}.ckpt" for n in range(1, 5)]


def test_verbose_names_each_save(tmp_path, capsys):
    ckpt = ModelCheckpoint(save_last=True, verbose=True)
    trainer(tmp_path, max_epochs=2, callbacks=[ckpt]).fit(Regressor(), *loaders())
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("ModelCheckpoint: saved")]
    assert len(lines) == 2 and lines[1].endswith("epoch=1-step=8.ckpt (epoch 1, step 8) and last.")


@pytest.mark.parametrize("kwargs, message", [
    ({"save_on_train_epoch_end": 1}, "save_on_train_epoch_end=1"),
    ({"train_time_interval": 60}, "train_time_interval=60"),
    ({"train_time_interval": timedelta(seconds=-1)}, "train_time_interval=datetime.timedelta\\(days=-1"),
])
def test_bad_options(kwargs, message):
    with pytest.raises(ValueError, match=message):
        ModelCheckpoint(**kwargs)
