"""ModelCheckpoint's step and time triggers rank by a fresh monitored value (waiting for the next validation), an
epoch stopped by ``max_steps`` is ranked, the checkpoint a fit resumed from survives the top k, and the record's
attributes can be set by hand and survive a resume into another folder."""

from __future__ import annotations

import os
from datetime import timedelta

import pytest

from stoker.callbacks import ModelCheckpoint
from stoker.trainer.checkpointing import checkpoint_step
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor


def _names(path):
    return sorted(n for n in os.listdir(path) if not n.startswith("."))


def test_a_step_trigger_ranks_the_validation_that_follows_it(tmp_path):
    # 4 steps per epoch, validation every 2nd epoch: steps 4 and 12 come before any fresh val/score.
    cb = ModelCheckpoint(dirpath=tmp_path, monitor="val/score", mode="max", every_n_train_steps=4,
                         filename="{step}-{val/score:.1f}")
    with pytest.warns(RuntimeWarning, match="Saving only `last` until it appears"):
        trainer(tmp_path, max_epochs=4, check_val_every_n_epoch=2, callbacks=[cb]).fit(
            Regressor(val_scores=[0.0, 0.5, 0.0, 3.0]), *loaders())
    assert cb.best_model_score == 3.0
    assert _names(tmp_path) == ["step=16-val_score=3.0.ckpt"]  # saved after epoch 3's validation, at its step


def test_a_step_trigger_every_step_ranks_each_mid_epoch_validation(tmp_path):
    scores = iter([0.2, 0.9])

    class TwoValidations(Regressor):
        def on_validation_epoch_end(self):
            self.log("val/score", next(scores))

    cb = ModelCheckpoint(dirpath=tmp_path, monitor="val/score", mode="max", every_n_train_steps=1, save_top_k=-1,
                         filename="{step}-{val/score:.1f}")
    with pytest.warns(RuntimeWarning, match="Saving only `last`"):
        trainer(tmp_path, max_epochs=1, val_check_interval=0.5, callbacks=[cb],
            num_sanity_val_steps=0).fit(TwoValidations(), *loaders())
    # Each value is ranked once, with the state at its validation; the steps between wait for the next one.
    assert _names(tmp_path) == ["step=2-val_score=0.2.ckpt", "step=4-val_score=0.9.ckpt"]
    assert cb.best_model_score == pytest.approx(0.9)


def test_a_time_trigger_waits_for_the_first_validation(tmp_path):
    cb = ModelCheckpoint(dirpath=tmp_path, monitor="val/score", mode="max", save_top_k=-1,
                         train_time_interval=timedelta(microseconds=1), filename="{step}-{val/score:.1f}")
    with pytest.warns(RuntimeWarning, match="Saving only `last`"):
        trainer(tmp_path, max_epochs=2, check_val_every_n_epoch=2, callbacks=[cb]).fit(
            Regressor(val_scores=[0.0, 0.6]), *loaders())
    assert _names(tmp_path) == ["step=8-val_score=0.6.ckpt"]  # no step was ranked on a missing or stale value


def test_an_epoch_cut_by_max_steps_is_ranked_beside_last(tmp_path):
    cb = ModelCheckpoint(dirpath=tmp_path, monitor="train/loss", save_last=True)
    trainer(tmp_path, max_steps=3, callbacks=[cb]).fit(Regressor(), *loaders())
    assert _names(tmp_path) == ["epoch=0-step=3.ckpt", "last.ckpt"]
    assert cb.best_model_path == str(tmp_path / "epoch=0-step=3.ckpt")
    assert checkpoint_step(cb.last_model_path) == 3


def test_the_checkpoint_a_fit_resumed_from_survives_the_top_k(tmp_path):
    make = lambda: ModelCheckpoint(dirpath=tmp_path, monitor="step", mode="max", save_top_k=2,
                                   every_n_train_steps=2, every_n_epochs=0)
    train, _ = loaders(n=80)  # 10 batches: one epoch
    trainer(tmp_path, max_steps=5, callbacks=[make()]).fit(Regressor(), train)
    assert _names(tmp_path) == ["epoch=0-step=2.ckpt", "epoch=0-step=4.ckpt"]
    resumed = make()
    trainer(tmp_path, max_steps=8, callbacks=[resumed]).fit(Regressor(), train,
                                                              ckpt_path=str(tmp_path / "epoch=0-step=4.ckpt"))
    # Steps 6 and 8 displaced steps 2 and 4; step 4, where this fit started, left the top k but not the disk.
    assert _names(tmp_path) == ["epoch=0-step=4.ckpt", "epoch=0-step=6.ckpt", "epoch=0-step=8.ckpt"]
    assert sorted(os.path.basename(p) for p in resumed.best_k_models) == ["epoch=0-step=6.ckpt",
                                                                          "epoch=0-step=8.ckpt"]
    assert resumed.resumed_from == os.path.realpath(tmp_path / "epoch=0-step=4.ckpt")


def test_the_record_can_be_set_by_hand_until_the_next_ranked_save(tmp_path):
    cb = ModelCheckpoint(dirpath=tmp_path, monitor="val/loss", save_top_k=2)
    cb.best_model_path, cb.best_model_score = "elsewhere/best.ckpt", 0.5
    cb.kth_best_model_path, cb.kth_value, cb.last_model_path = "elsewhere/kth.ckpt", 0.75, "last-7.ckpt"
    state = cb.state_dict()
    assert (state["best_model_path"], state["best_model_score"]) == ("elsewhere/best.ckpt", 0.5)
    assert (state["kth_best_model_path"], state["kth_value"], state["last_model_path"]) == (
        "elsewhere/kth.ckpt", 0.75, "last-7.ckpt")
    cb.last_model_path = ""
    trainer(tmp_path, max_epochs=1, callbacks=[cb]).fit(Regressor(), *loaders())
    # The fit's ranked save replaced the values set by hand.
    assert cb.best_model_path == cb.kth_best_model_path == str(tmp_path / "epoch=0-step=4.ckpt")
    assert cb.best_model_score == cb.kth_value == cb.best_k_models[cb.best_model_path]


def test_a_resume_into_another_folder_warns_and_keeps_the_old_best(tmp_path):
    first = ModelCheckpoint(dirpath=tmp_path / "a", monitor="val/loss", save_last=True)
    trainer(tmp_path, max_epochs=1, callbacks=[first]).fit(Regressor(), *loaders())
    moved = ModelCheckpoint(dirpath=tmp_path / "b", monitor="val/loss")
    with pytest.warns(UserWarning, match="The dirpath has changed from .*/a' to .*/b'"):
        moved.load_state_dict(first.state_dict())
    assert moved.best_model_path == first.best_model_path and moved.best_k_models == {}
    assert moved.best_model_score is None  # no score is ranked in the new folder yet
    # A folder moved as a whole keeps its top k, with no warning.
    os.rename(tmp_path / "a", tmp_path / "c")
    kept = ModelCheckpoint(dirpath=tmp_path / "c", monitor="val/loss")
    kept.load_state_dict(first.state_dict())
    assert kept.best_model_path == str(tmp_path / "c" / os.path.basename(first.best_model_path))


def test_setup_takes_lightnings_keywords_and_refuses_a_url_dirpath(tmp_path):
    t = trainer(tmp_path)
    cb = ModelCheckpoint()
    cb.setup(trainer=t, pl_module=Regressor(), stage="fit")
    assert cb.dirpath == str(tmp_path / "checkpoints")
    cb.teardown(t, None, "fit")
    with pytest.raises(ValueError, match=r"dirpath='s3://bucket/run', save_last='link'\) is only supported for "
                                         "local file paths"):
        ModelCheckpoint(dirpath="s3://bucket/run", save_last="link").setup(t, None, "fit")
