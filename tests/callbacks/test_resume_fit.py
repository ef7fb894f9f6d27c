"""Callback state survives an exact resume: stop mid-epoch, resume from `last`, match the uninterrupted run."""

import os
import time

import torch

from stoker import Callback, EarlyStopping, ModelCheckpoint, Timer
from stoker.trainer.checkpointing import checkpoint_step
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor
from tests.helpers.weights import params_of

SCORES = [3.0, 1.0, 2.0, 1.5, 2.2]


class StopAt(Callback):
    """Simulates an interruption: a pause (so elapsed time is measurable), then a stop after ``step``."""

    def __init__(self, step):
        self.step = step

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == self.step:
            time.sleep(0.2)
            trainer.should_stop = True


class RecordingTimer(Timer):
    loaded = None

    def load_state_dict(self, state_dict):
        self.loaded = state_dict
        super().load_state_dict(state_dict)


def _callbacks():
    return [EarlyStopping("val/score", patience=5),
            ModelCheckpoint(save_last=True, monitor="val/score", save_top_k=2, filename="{epoch}-{val/score:.1f}"),
            RecordingTimer()]


def _fit(root, extra=(), ckpt_path=None):
    callbacks = _callbacks() + list(extra)
    module = Regressor(val_scores=SCORES)
    t = trainer(root, max_epochs=5, callbacks=callbacks)
    t.fit(module, *loaders(shuffle=True), ckpt_path=ckpt_path)
    return t, module, callbacks


def test_callback_states_survive_an_exact_resume(tmp_path):
    full, full_module, (full_stop, full_ckpt, _) = _fit(tmp_path / "full")

    part, _, (_, _, part_timer, _) = _fit(tmp_path / "part", extra=[StopAt(6)])
    assert part.global_step == 6
    last = tmp_path / "part" / "checkpoints" / "last.ckpt"
    assert checkpoint_step(str(last)) == 6
    # A stop mid-epoch writes only `last`: the partial epoch is not ranked.
    assert sorted(os.listdir(last.parent)) == ["epoch=0-val_score=3.0.ckpt", "last.ckpt"]

    resumed, module, (stop, ckpt, timer) = _fit(tmp_path / "part", ckpt_path="last")
    assert resumed.global_step == full.global_step == 20
    for a, b in zip(params_of(module), params_of(full_module)):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    assert (stop.wait_count, stop.best_score) == (full_stop.wait_count, full_stop.best_score) == (3, 1.0)
    names = lambda cb: {os.path.basename(p): s for p, s in cb.best_k_models.items()}  # noqa: E731
    assert names(ckpt) == names(full_ckpt) == {"epoch=1-val_score=1.0.ckpt": 1.0, "epoch=3-val_score=1.5.ckpt": 1.5}
    assert sorted(os.listdir(tmp_path / "part" / "checkpoints")) == \
        sorted(os.listdir(tmp_path / "full" / "checkpoints")) == \
        ["epoch=1-val_score=1.0.ckpt", "epoch=3-val_score=1.5.ckpt", "last.ckpt"]
    assert os.path.basename(ckpt.best_model_path) == "epoch=1-val_score=1.0.ckpt"
    # Elapsed training time carried over: the resumed Timer counts on from the interrupted run's 0.2 s+.
    saved = timer.loaded["time_elapsed"]["train"]
    assert saved >= 0.2
    assert timer.time_elapsed("train") > saved
    assert part_timer.time_elapsed("train") >= saved


def test_resuming_without_a_callback_whose_state_was_saved_warns_and_names_it(tmp_path):
    import warnings as _warnings

    import pytest

    from stoker import EarlyStopping

    train, val = loaders()
    stopper = EarlyStopping(monitor="val/loss", patience=5)
    first = trainer(tmp_path, max_epochs=1, callbacks=[stopper])
    first.fit(Regressor(), train, val)
    with pytest.warns(UserWarning, match=r"Please add the following callbacks: \[\"EarlyStopping\{"):
        trainer(tmp_path, max_epochs=2).fit(Regressor(), train, val, ckpt_path="last")
    with _warnings.catch_warnings():
        _warnings.filterwarnings("error", message=".*Please add the following callbacks")
        again = trainer(tmp_path, max_epochs=3, callbacks=[EarlyStopping(monitor="val/loss", patience=5)],
                        enable_progress_bar=True)  # a callback without state (the bar) may come and go
        again.fit(Regressor(), train, val, ckpt_path="last")
