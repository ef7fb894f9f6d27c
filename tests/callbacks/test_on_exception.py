"""OnExceptionCheckpoint in real fits: what is saved when fit raises, resuming from it, and when nothing is saved."""

from __future__ import annotations

import os

import pytest

from stoker import Callback, OnExceptionCheckpoint
from stoker.trainer.checkpointing import checkpoint_step
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor


class FailsAt(Regressor):
    def __init__(self, step: int, error: type = RuntimeError) -> None:
        super().__init__()
        self.fail_step, self.error = step, error

    def training_step(self, batch, batch_idx):
        if self.global_step == self.fail_step:
            raise self.error(f"boom at step {self.global_step}")
        return super().training_step(batch, batch_idx)


def test_saves_the_state_when_fit_raises_and_a_resumed_fit_completes(tmp_path, capfd):
    callback = OnExceptionCheckpoint(tmp_path / "crash")
    t = trainer(tmp_path, max_epochs=2, callbacks=[callback], enable_checkpointing=False)
    with pytest.raises(RuntimeError, match="boom at step 5"):
        t.fit(FailsAt(5), *loaders())
    assert callback.ckpt_path == str(tmp_path / "crash" / "on_exception") == callback.saved_path
    assert checkpoint_step(callback.ckpt_path) == 5
    assert f"RuntimeError at step 5 (epoch 1); saved {callback.ckpt_path}" in capfd.readouterr().err

    resumed = trainer(tmp_path, max_epochs=2, callbacks=[OnExceptionCheckpoint(tmp_path / "crash")],
                      enable_checkpointing=False)
    resumed.fit(Regressor(), *loaders(), ckpt_path=callback.ckpt_path)
    assert resumed.global_step == 7  # the batch that raised is not run again: 8 batches, one skipped
    assert not os.path.exists(callback.ckpt_path)  # a fit that ended normally removes the stale state


def test_keyboard_interrupt_from_a_callback_is_saved_too(tmp_path):
    class Interrupt(Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            if trainer.global_step == 3:
                raise KeyboardInterrupt

    callback = OnExceptionCheckpoint(tmp_path, filename="ctrl:c")
    t = trainer(tmp_path, max_epochs=1, callbacks=[Interrupt(), callback], enable_checkpointing=False)
    with pytest.raises(KeyboardInterrupt):
        t.fit(Regressor(), *loaders())
    assert os.path.basename(callback.ckpt_path) == "ctrl_c" and checkpoint_step(callback.ckpt_path) == 3


def test_nothing_is_saved_before_training_or_outside_fit(tmp_path):
    class BadOptimizers(Regressor):
        def configure_optimizers(self):
            raise ValueError("no optimizer")

    callback = OnExceptionCheckpoint(tmp_path / "c")
    t = trainer(tmp_path, max_epochs=1, callbacks=[callback], enable_checkpointing=False)
    with pytest.raises(ValueError, match="no optimizer"):
        t.fit(BadOptimizers(), *loaders())

    class BadValidation(Regressor):
        def validation_step(self, batch, batch_idx):
            raise RuntimeError("validation failed")

    with pytest.raises(RuntimeError, match="validation failed"):
        t.validate(BadValidation(), loaders()[1])
    assert not os.path.exists(callback.ckpt_path) and callback.saved_path is None


def test_a_failing_save_warns_and_the_original_exception_is_raised(tmp_path, monkeypatch):
    callback = OnExceptionCheckpoint(tmp_path / "c")
    t = trainer(tmp_path, max_epochs=1, callbacks=[callback], enable_checkpointing=False)

    def broken(path):
        raise OSError("disk full")

    monkeypatch.setattr(t, "save_checkpoint", broken)
    with pytest.warns(RuntimeWarning, match="could not save .* after RuntimeError: OSError: disk full"):
        with pytest.raises(RuntimeError, match="boom at step 2"):
            t.fit(FailsAt(2), *loaders())


def test_a_preemption_exit_is_not_saved_again(tmp_path):
    callback = OnExceptionCheckpoint(tmp_path / "c")
    t = trainer(tmp_path, max_epochs=1, callbacks=[callback], enable_checkpointing=False)
    with pytest.raises(SystemExit):
        t.fit(FailsAt(1, error=SystemExit), *loaders())
    assert not os.path.exists(callback.ckpt_path)


@pytest.mark.parametrize("kwargs, error", [({"dirpath": ""}, TypeError), ({"dirpath": None}, TypeError),
                                           ({"dirpath": ".", "filename": " "}, ValueError)])
def test_bad_arguments(kwargs, error):
    with pytest.raises(error, match="OnExceptionCheckpoint"):
        OnExceptionCheckpoint(**kwargs)
