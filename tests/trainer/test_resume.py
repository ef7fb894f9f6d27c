"""Exact resume: stopped anywhere (in-process, by SIGKILL, by SIGTERM), a run continues to the same final weights."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from typing import Any

import pytest
import torch

from stoker import Callback, Trainer
from tests.helpers.dist_spawn import REPO, base_env
from tests.helpers.weights import assert_same_weights
from tests.trainer import resume_script
from tests.trainer.resume_script import ACCUMULATE, BATCH, EPOCHS, N, run

BATCHES_PER_EPOCH = N // BATCH
TOTAL_MICRO_BATCHES = EPOCHS * BATCHES_PER_EPOCH


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, torch.Tensor]:
    return run(str(tmp_path_factory.mktemp("full")))


class Crash(Exception):
    pass


class SaveThenCrash(Callback):
    """Saves a checkpoint from inside a hook, then crashes the run (the checkpoint must resume exactly)."""

    def __init__(self, hook: str, at: int) -> None:
        self.hook, self.at, self.count = hook, at, 0

    def _maybe(self, trainer: Trainer, name: str) -> None:
        if name == self.hook:
            self.count += 1
            if self.count == self.at:
                trainer.save_checkpoint(os.path.join(trainer.default_root_dir, "checkpoints", "last"))
                raise Crash(f"{name} #{self.at}")

    def on_train_batch_end(self, trainer: Trainer, module: Any, *args: Any) -> None:
        self._maybe(trainer, "on_train_batch_end")

    def on_validation_end(self, trainer: Trainer, module: Any) -> None:
        self._maybe(trainer, "on_validation_end")

    def on_train_epoch_end(self, trainer: Trainer, module: Any) -> None:
        self._maybe(trainer, "on_train_epoch_end")


@pytest.mark.parametrize("hook, at", [
    ("on_train_batch_end", 1),   # inside the first accumulation window (its gradients are in the checkpoint)
    ("on_train_batch_end", 4),   # right after an optimizer step
    ("on_train_batch_end", 7),   # the epoch's last batch, before its validation
    ("on_validation_end", 2),    # the end-of-epoch validation of epoch 1
    ("on_train_epoch_end", 1),   # after epoch 0, before its epoch-level bookkeeping finished
])
def test_resume_from_a_checkpoint_saved_in_any_hook(tmp_path: Any, uninterrupted: dict, hook: str, at: int) -> None:
    trainer = Trainer(max_epochs=EPOCHS, accumulate=ACCUMULATE, seed=1234, default_root_dir=str(tmp_path),
                      logger=False, enable_checkpointing=False, enable_progress_bar=False,
                      callbacks=[SaveThenCrash(hook, at)])
    module = resume_script.Killable()
    with pytest.raises(Crash):
        trainer.fit(module, *resume_script.loaders())
    resumed = run(str(tmp_path), ckpt_path="last")
    assert_same_weights(resumed, uninterrupted, f"saved in {hook} #{at}")


def test_resume_after_the_process_is_killed_at_a_random_step(tmp_path: Any, uninterrupted: dict) -> None:
    kill_at = random.randrange(2, TOTAL_MICRO_BATCHES)  # never the first: a checkpoint must exist
    cmd = [sys.executable, "-m", "tests.trainer.resume_script", str(tmp_path), "--kill-at", str(kill_at)]
    proc = subprocess.run(cmd, cwd=REPO, env=base_env(), capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, (kill_at, proc.stdout, proc.stderr)
    trainer = Trainer(default_root_dir=str(tmp_path), logger=False, enable_progress_bar=False)
    last = trainer.find_last_checkpoint()
    assert last is not None and os.path.basename(last) == "last"
    resumed = run(str(tmp_path), ckpt_path="last")
    assert_same_weights(resumed, uninterrupted, f"killed in micro-batch {kill_at}")


def test_sigterm_finishes_the_step_saves_and_exits_non_zero(tmp_path: Any, uninterrupted: dict,
                                                            capfd: pytest.CaptureFixture) -> None:
    signal_at = 3  # the first micro-batch of the second window: the Trainer finishes that window first
    previous = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as exit_info:
        run(str(tmp_path), signal_at=signal_at)
    assert exit_info.value.code == 128 + signal.SIGTERM
    assert signal.getsignal(signal.SIGTERM) is previous  # the Trainer's handler is gone again
    err = capfd.readouterr().err
    assert "preempted by SIGTERM at step 2" in err and "ckpt_path='last'" in err, err
    last = os.path.join(str(tmp_path), "checkpoints", "last.ckpt")
    assert Trainer(default_root_dir=str(tmp_path), logger=False).find_last_checkpoint() == last
    resumed = run(str(tmp_path), ckpt_path="last")
    assert_same_weights(resumed, uninterrupted, "after SIGTERM")


@pytest.mark.skipif(not hasattr(signal, "SIGUSR1"), reason="no SIGUSR1 on this platform")
def test_sigusr1_before_the_first_step_saves_after_it(tmp_path: Any, monkeypatch: pytest.MonkeyPatch,
                                                      capfd: pytest.CaptureFixture) -> None:
    monkeypatch.setattr(resume_script.Killable, "on_train_start",
                        lambda self: os.kill(os.getpid(), signal.SIGUSR1), raising=False)
    with pytest.raises(SystemExit) as exit_info:
        run(str(tmp_path))
    assert exit_info.value.code == 128 + signal.SIGUSR1
    assert "preempted by SIGUSR1 at step 1" in capfd.readouterr().err
    assert os.path.isdir(os.path.join(str(tmp_path), "checkpoints", "last.ckpt"))


def test_ckpt_path_last_without_a_checkpoint_starts_fresh(tmp_path: Any, uninterrupted: dict) -> None:
    assert_same_weights(run(str(tmp_path), ckpt_path="last"), uninterrupted, "fresh start")


def test_ckpt_path_that_is_not_a_folder_fails(tmp_path: Any) -> None:
    with pytest.raises(FileNotFoundError, match="not a checkpoint folder"):
        run(str(tmp_path), ckpt_path=str(tmp_path / "nope"))


def test_resume_at_an_epoch_end_steps_a_plateau_scheduler_with_the_restored_metric(tmp_path: Any) -> None:
    from tests.helpers.models import Regressor, make_loader, make_regression_data

    def fit(root: str, callbacks: list, ckpt_path: str | None = None) -> tuple[dict, float]:
        module = Regressor(lr=0.5, scheduler="plateau", interval="epoch")  # too high: val/loss stalls
        trainer = Trainer(max_epochs=4, seed=3, default_root_dir=root, logger=False, enable_checkpointing=False,
                          enable_progress_bar=False, callbacks=callbacks)
        trainer.fit(module, make_loader(make_regression_data(n=16), batch_size=8, shuffle=True),
                    make_loader(make_regression_data(n=16, seed=5), batch_size=8), ckpt_path=ckpt_path)
        return module.state_dict(), trainer.optimizers[0].param_groups[0]["lr"]

    want, want_lr = fit(str(tmp_path / "full"), [])
    assert want_lr < 0.5
    with pytest.raises(Crash):  # saved in on_train_epoch_end of epoch 1: its plateau step is still to come
        fit(str(tmp_path / "cut"), [SaveThenCrash("on_train_epoch_end", 2)])
    got, got_lr = fit(str(tmp_path / "cut"), [], ckpt_path="last")
    assert got_lr == want_lr
    assert_same_weights(got, want, "plateau resumed at an epoch end")
