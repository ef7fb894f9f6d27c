"""ModelCheckpoint inside real fits: default layout, last always newest, top-k across resumes, weights export."""

import inspect
import os

import pytest
import torch

from stoker import ModelCheckpoint, load_checkpoint_in_model
from stoker.accelerator import wait_for_checkpoints
from stoker.accelerator.checkpointing.checkpoint import verify_checkpoint
from stoker.trainer.checkpointing import checkpoint_step
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor
from tests.helpers.weights import params_of


def _folders(path):
    return sorted(n for n in os.listdir(path) if not n.startswith("."))


def test_default_trainer_checkpoint_saves_last_every_epoch_and_resumes(tmp_path):
    steps_seen = []

    class Record(ModelCheckpoint):  # observe what `last` holds after every epoch-end save
        def on_train_epoch_end(self, trainer, module):
            super().on_train_epoch_end(trainer, module)
            # The save is committed in the background (fsync, rename); its files were written before it returned.
            wait_for_checkpoints(trainer.accelerator)
            steps_seen.append(checkpoint_step(self.last_model_path))

    train, val = loaders()
    t = trainer(tmp_path, max_epochs=3, callbacks=[Record(save_last=True)])
    t.fit(Regressor(), train, val)
    assert steps_seen == [4, 8, 12]
    ckpts = tmp_path / "checkpoints"
    assert _folders(ckpts) == ["epoch=2-step=12.ckpt", "last.ckpt"]
    verify_checkpoint(ckpts / "last.ckpt")
    assert t.checkpoint_callback.best_model_path == str(ckpts / "epoch=2-step=12.ckpt")

    resumed = trainer(tmp_path, max_epochs=4, callbacks=[ModelCheckpoint(save_last=True)])
    module = Regressor()
    resumed.fit(module, *loaders(), ckpt_path="last")
    assert resumed.global_step == 16 and module.validations == 1  # only epoch 3 ran
    assert checkpoint_step(str(ckpts / "last.ckpt")) == 16


def test_last_is_refreshed_when_the_monitored_metric_stops_improving(tmp_path):
    # Lightning >= 2.6 stops refreshing last.ckpt here, so ckpt_path="last" resumes from epoch 1.
    scores = [1.0, 0.5, 0.9, 0.8, 0.7, 0.6]
    train, val = loaders()
    ckpt = ModelCheckpoint(save_last=True, monitor="val/score", save_top_k=1)
    t = trainer(tmp_path, max_epochs=4, callbacks=[ckpt])
    t.fit(Regressor(val_scores=scores), train, val)
    ckpts = tmp_path / "checkpoints"
    assert _folders(ckpts) == ["epoch=1-step=8.ckpt", "last.ckpt"]
    assert float(ckpt.best_model_score) == 0.5
    assert checkpoint_step(str(ckpts / "last.ckpt")) == 16  # epoch 3's state although epoch 1 is the best

    module = Regressor(val_scores=scores)
    resumed = trainer(tmp_path, max_epochs=5, callbacks=[ModelCheckpoint(save_last=True, monitor="val/score")])
    resumed.fit(module, *loaders(), ckpt_path="last")
    assert module.validations == 1 and resumed.global_step == 20


def test_top_k_is_right_across_a_resume(tmp_path):
    scores = [3.0, 1.0, 2.0, 0.5, 4.0]
    make = lambda: ModelCheckpoint(save_last=True, monitor="val/score", save_top_k=2,  # noqa: E731
                                   filename="{epoch}-{val/score:.1f}")
    first = make()
    trainer(tmp_path, max_epochs=3, callbacks=[first]).fit(Regressor(val_scores=scores), *loaders())
    ckpts = tmp_path / "checkpoints"
    assert _folders(ckpts) == ["epoch=1-val_score=1.0.ckpt", "epoch=2-val_score=2.0.ckpt", "last.ckpt"]

    second = make()
    trainer(tmp_path, max_epochs=5, callbacks=[second]).fit(Regressor(val_scores=scores), *loaders(), ckpt_path="last")
    # Epoch 3 (0.5) displaced epoch 2 (2.0), which the resumed callback knew about from the checkpoint.
    assert _folders(ckpts) == ["epoch=1-val_score=1.0.ckpt", "epoch=3-val_score=0.5.ckpt", "last.ckpt"]
    assert second.best_model_path == str(ckpts / "epoch=3-val_score=0.5.ckpt")
    assert second.kth_best_model_path == str(ckpts / "epoch=1-val_score=1.0.ckpt")
    assert sorted(second.best_k_models.values()) == [0.5, 1.0]


def test_epochs_without_validation_are_not_ranked_with_a_stale_score(tmp_path):
    ckpt = ModelCheckpoint(save_last=True, monitor="val/score", save_top_k=2, filename="{epoch}-{val/score:.1f}")
    t = trainer(tmp_path, max_epochs=4, check_val_every_n_epoch=2, callbacks=[ckpt])
    with pytest.warns(RuntimeWarning, match="Saving only `last` until it appears"):  # epoch 0: no validation yet
        t.fit(Regressor(val_scores=[9.0, 2.0, 9.0, 3.0]), *loaders())
    # Epoch 2 saw only epoch 1's score: it refreshed `last` but did not take a top-k place under that score.
    assert _folders(tmp_path / "checkpoints") == [
        "epoch=1-val_score=2.0.ckpt", "epoch=3-val_score=3.0.ckpt", "last.ckpt"]
    assert checkpoint_step(str(tmp_path / "checkpoints" / "last.ckpt")) == 16


def test_every_n_train_steps_with_accumulation(tmp_path):
    ckpt = ModelCheckpoint(every_n_train_steps=3, every_n_epochs=None, save_top_k=-1, save_last=False)
    train, _ = loaders(n=64)  # 8 batches, accumulate 2 -> 4 optimizer steps per epoch
    trainer(tmp_path, max_epochs=2, accumulate=2, callbacks=[ckpt]).fit(Regressor(), train)
    assert _folders(tmp_path / "checkpoints") == ["epoch=0-step=3.ckpt", "epoch=1-step=6.ckpt"]
    assert checkpoint_step(str(tmp_path / "checkpoints" / "epoch=1-step=6.ckpt")) == 6


def test_export_weights_loads_into_a_fresh_model(tmp_path):
    ckpt = ModelCheckpoint(save_last=True, dirpath=tmp_path / "ck", monitor="val/loss", export_weights=True)
    module = Regressor()
    trainer(tmp_path, max_epochs=2, callbacks=[ckpt]).fit(module, *loaders())
    assert _folders(tmp_path / "ck" / "weights") == [os.path.basename(ckpt.best_model_path), "last.ckpt"]
    fresh = Regressor()
    fresh.net[0].weight.data.zero_()
    load_checkpoint_in_model(fresh, str(tmp_path / "ck" / "weights" / "last.ckpt"))
    for a, b in zip(params_of(fresh), params_of(module)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)


def test_monitoring_a_validation_metric_without_validation_is_a_clear_error(tmp_path):
    ckpt = ModelCheckpoint(save_last=True, monitor="val/loss")
    train, _ = loaders()
    with pytest.raises(RuntimeError, match=r"monitor='val/loss'.*Available metrics: \['train/loss'\]"):
        trainer(tmp_path, max_epochs=1, callbacks=[ckpt]).fit(Regressor(), train)


def test_async_save_keeps_the_same_checkpoints_and_deletes_only_after_each_commit(tmp_path, monkeypatch):
    import time

    import stoker.accelerator.accelerator as callback_module  # where a save removes evicted folders
    from stoker.accelerator.checkpointing import checkpoint as accelerator_checkpoint

    scores = [3.0, 1.0, 2.0, 0.5]

    def make(**kw):
        return ModelCheckpoint(save_last=True, monitor="val/score", save_top_k=2, filename="{epoch}-{val/score:.1f}",
                               **kw)

    sync = make()
    trainer(tmp_path / "sync", max_epochs=4, callbacks=[sync]).fit(Regressor(val_scores=scores), *loaders())

    real_write_files, real_remove = accelerator_checkpoint._write_files, callback_module.remove_checkpoint
    seen = []

    def slow_write_files(tmp, files):  # a slow disk: the follow-up must still wait for the commit
        time.sleep(0.05)
        return real_write_files(tmp, files)

    def remove(path, io=None):
        if os.path.isdir(path):  # what is complete when an evicted checkpoint goes
            kept = sorted(checkpoint_step(p) or -1 for p in ckpt.best_k_models)
            seen.append((os.path.basename(path), kept, checkpoint_step(os.path.join(ckpt.dirpath, "last.ckpt"))))
        real_remove(path, io)

    monkeypatch.setattr(accelerator_checkpoint, "_write_files", slow_write_files)
    monkeypatch.setattr(callback_module, "remove_checkpoint", remove)
    ckpt = make(async_save=True)
    module = Regressor(val_scores=scores)
    trainer(tmp_path / "async", max_epochs=4, callbacks=[ckpt]).fit(module, *loaders())
    # Epoch 2 (2.0) displaced epoch 0 (3.0), epoch 3 (0.5) displaced epoch 2: each removed only once the kept
    # checkpoints (steps 8 and 12, then 8 and 16) were complete and `last` held the newest.
    assert seen == [("epoch=0-val_score=3.0.ckpt", [8, 12], 12), ("epoch=2-val_score=2.0.ckpt", [8, 16], 16)]
    ckpts = tmp_path / "async" / "checkpoints"
    assert sorted(os.listdir(ckpts)) == _folders(tmp_path / "sync" / "checkpoints")  # nothing hidden is left
    assert os.path.basename(ckpt.best_model_path) == os.path.basename(sync.best_model_path)
    for name in os.listdir(ckpts):
        verify_checkpoint(ckpts / name)
        got, want = Regressor(), Regressor()
        load_checkpoint_in_model(got, str(ckpts / name))
        load_checkpoint_in_model(want, str(tmp_path / "sync" / "checkpoints" / name))
        for a, b in zip(params_of(got), params_of(want)):
            torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert checkpoint_step(str(ckpts / "last.ckpt")) == 16

    resumed = trainer(tmp_path / "async", max_epochs=5, callbacks=[make(async_save=True)])
    resumed.fit(Regressor(val_scores=scores + [0.1]), *loaders(), ckpt_path="last")
    assert resumed.global_step == 20 and checkpoint_step(str(ckpts / "last.ckpt")) == 20
    assert sorted(os.listdir(ckpts)) == ["epoch=3-val_score=0.5.ckpt", "epoch=4-val_score=0.1.ckpt", "last.ckpt"]


def test_a_step_trigger_alone_does_not_also_save_at_every_epoch_end(tmp_path):
    ckpt = ModelCheckpoint(save_last=True, every_n_train_steps=3, save_top_k=-1)  # every_n_epochs not given
    assert ckpt.every_n_epochs == 0
    train, _ = loaders()  # 4 optimizer steps per epoch
    trainer(tmp_path, max_epochs=2, callbacks=[ckpt]).fit(Regressor(), train)
    assert _folders(tmp_path / "checkpoints") == ["epoch=0-step=3.ckpt", "epoch=1-step=6.ckpt", "last.ckpt"]
    assert checkpoint_step(str(tmp_path / "checkpoints" / "last.ckpt")) == 8  # `last` still ends fresh


def test_step_and_epoch_triggers_both_save_when_both_are_asked_for(tmp_path):
    ckpt = ModelCheckpoint(every_n_train_steps=3, every_n_epochs=1, save_top_k=-1, save_last=False)
    train, _ = loaders()
    trainer(tmp_path, max_epochs=2, callbacks=[ckpt]).fit(Regressor(), train)
    assert _folders(tmp_path / "checkpoints") == ["epoch=0-step=3.ckpt", "epoch=0-step=4.ckpt", "epoch=1-step=6.ckpt",
                                                  "epoch=1-step=8.ckpt"]
    assert ModelCheckpoint().every_n_epochs == 1
    assert repr(inspect.signature(ModelCheckpoint).parameters["every_n_epochs"].default) == "1"
