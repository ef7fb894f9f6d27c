"""The end of a run: the closing line (stdout) says why fit/validate/test stopped and where the checkpoints and
logs are; ``run_summary.json`` in the run's folder (the first logger's version folder) holds the same facts; a fit
with nothing left to do says so."""

from __future__ import annotations

import json
import os
import signal

import pytest

from stoker import Callback, EarlyStopping, ModelCheckpoint, Timer
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor


def _closing(err: str) -> list[str]:
    lines = err.splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("stoker: ") and not line.startswith("stoker: resumed"))
    return lines[start:start + 2]


def _summary(t) -> dict:
    with open(os.path.join(t.loggers[0].log_dir, "run_summary.json"), encoding="utf-8") as f:
        return json.load(f)


def test_fit_says_max_epochs_and_where_checkpoints_and_logs_are(tmp_path, capsys):
    t = trainer(tmp_path, max_epochs=2, logger="csv", callbacks=[ModelCheckpoint(save_last=True)])
    t.fit(Regressor(), *loaders())
    head, where = _closing(capsys.readouterr().out)
    assert head == "stoker: fit stopped at epoch 1 (global_step=8): max_epochs=2 reached."
    log_dir = os.path.abspath(t.loggers[0].log_dir)
    callback = t.checkpoint_callback
    assert f"best checkpoint: {callback.best_model_path}" in where
    assert f"last checkpoint: {callback.last_model_path}" in where and f"logs: {log_dir}" in where
    facts = _summary(t)["fit"]
    assert facts["status"] == "completed" and facts["reason"] == "max_epochs" and facts["global_step"] == 8
    assert facts["best_checkpoint"] == callback.best_model_path and facts["log_dirs"] == [log_dir]
    assert t.run_report.last["reason"] == "max_epochs"


def test_max_steps_and_a_run_that_writes_nothing_writes_no_summary(tmp_path, capsys):
    t = trainer(tmp_path, max_epochs=5, max_steps=3, enable_checkpointing=False)
    t.fit(Regressor(), *loaders())
    head, *rest = _closing(capsys.readouterr().out)
    assert head == "stoker: fit stopped at epoch 0 (global_step=3): max_steps=3 reached."
    assert rest == []  # no checkpoint, no logger: nothing to point at
    assert t.run_report.last["reason"] == "max_steps" and not os.listdir(tmp_path)


def test_a_run_without_a_logger_leaves_no_summary_beside_its_checkpoints(tmp_path, capsys):
    # Without a logger the run has no folder of its own: default_root_dir may be the checkpoints' own folder (as in
    # many Lightning scripts and tests), which then holds the checkpoints and nothing else.
    t = trainer(tmp_path, max_epochs=1, callbacks=[ModelCheckpoint(dirpath=tmp_path, filename="model")])
    t.fit(Regressor(), *loaders())
    assert sorted(os.listdir(tmp_path)) == ["model.ckpt"]
    assert "best checkpoint: " in _closing(capsys.readouterr().out)[1]  # the line still says where it is


def test_early_stopping_gives_its_reason(tmp_path, capsys):
    stop = EarlyStopping("val/score", patience=1)
    t = trainer(tmp_path, max_epochs=10, callbacks=[stop], logger="csv")
    t.fit(Regressor(val_scores=[1.0, 2.0, 3.0]), *loaders())
    head = _closing(capsys.readouterr().out)[0]
    assert head.startswith("stoker: fit stopped at epoch 1 (global_step=8): EarlyStopping: val/score did not improve")
    facts = _summary(t)["fit"]
    assert facts["reason"] == "early_stopping" and stop.stopping_reason_message.rstrip(".") in facts["why"]


def test_the_time_limit_is_named(tmp_path, capsys):
    t = trainer(tmp_path, max_epochs=10, callbacks=[Timer(duration={"seconds": 0})], logger="csv")
    t.fit(Regressor(), *loaders())
    head = _closing(capsys.readouterr().out)[0]
    assert head.startswith("stoker: fit stopped at epoch 0 (global_step=1): Timer: duration 0:00:00 reached after")
    assert _summary(t)["fit"]["reason"] == "time_limit"


class _Signal(Callback):
    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step == 2:
            signal.raise_signal(signal.SIGTERM)


def test_a_signal_names_the_signal_and_the_resumable_checkpoint(tmp_path, capsys):
    t = trainer(tmp_path, max_epochs=3, callbacks=[_Signal()], logger="csv")
    with pytest.raises(SystemExit):
        t.fit(Regressor(), *loaders())
    head, where = _closing(capsys.readouterr().out)
    assert head == "stoker: fit stopped at epoch 0 (global_step=2): preempted by SIGTERM."
    last = os.path.join(os.path.abspath(t.loggers[0].log_dir), "checkpoints", "last.ckpt")
    assert f"last checkpoint: {last}" in where
    facts = _summary(t)["fit"]
    assert facts["status"] == "interrupted" and facts["reason"] == "signal" and facts["last_checkpoint"] == last


class _Broken(Regressor):
    def training_step(self, batch, batch_idx):
        if batch_idx == 1:
            raise ValueError("bad batch")
        return super().training_step(batch, batch_idx)


def test_an_error_is_named_and_still_raised(tmp_path, capsys):
    t = trainer(tmp_path, max_epochs=1, logger="csv")
    with pytest.raises(ValueError, match="bad batch"):
        t.fit(_Broken(), *loaders())
    head = _closing(capsys.readouterr().out)[0]
    assert head == "stoker: fit stopped at epoch 0 (global_step=1): failed with ValueError: bad batch."
    assert _summary(t)["fit"]["status"] == "failed"


class _BrokenTest(Regressor):
    def test_step(self, batch, batch_idx):
        raise ValueError("bad batch")


def test_validate_and_test_write_their_own_entry_and_say_a_failure(tmp_path, capsys):
    t = trainer(tmp_path, max_epochs=1, enable_checkpointing=False, logger="csv")
    module = Regressor()
    t.fit(module, *loaders())
    capsys.readouterr()
    t.validate(module, loaders()[1])
    assert capsys.readouterr().out == ""  # a validate that went well stays quiet; its facts go to the file
    summary = _summary(t)
    assert set(summary) == {"fit", "validate"} and summary["validate"]["status"] == "completed"
    assert summary["validate"]["why"] == "finished (2 batches)"
    with pytest.raises(ValueError, match="bad batch"):
        t.test(_BrokenTest(), loaders()[1])
    assert _closing(capsys.readouterr().out)[0] == "stoker: test failed with ValueError: bad batch."
    assert _summary(t)["test"]["status"] == "failed"


def test_fit_again_with_nothing_left_says_so_and_why(tmp_path, capsys):
    t = trainer(tmp_path, max_epochs=2)
    t.fit(Regressor(), *loaders())
    t.fit(Regressor(), *loaders())
    assert _closing(capsys.readouterr().out)[0] == (
        "stoker: fit stopped at epoch 1 (global_step=8): nothing to train: this Trainer has already done 2 epochs "
        "(max_epochs=2); raise max_epochs to train on.")


def test_resuming_a_finished_run_says_nothing_to_train(tmp_path, capsys):
    trainer(tmp_path, max_epochs=2).fit(Regressor(), *loaders())
    trainer(tmp_path, max_epochs=2).fit(Regressor(), *loaders(), ckpt_path="last")
    assert "nothing to train: the checkpoint it resumed from has already done 2 epochs (max_epochs=2); raise " \
        "max_epochs to train on." in _closing(capsys.readouterr().out)[0]
    trainer(tmp_path, max_steps=8).fit(Regressor(), *loaders(), ckpt_path="last")
    assert "nothing to train: the checkpoint it resumed from has already done 8 optimizer steps (max_steps=8); " \
        "raise max_steps to train on." in _closing(capsys.readouterr().out)[0]


def test_a_fit_with_training_turned_off_says_so(tmp_path, capsys):
    t = trainer(tmp_path, max_epochs=2, limit_train_batches=0, logger="csv")
    t.fit(Regressor(), *loaders())
    assert _closing(capsys.readouterr().out)[0] == (
        "stoker: fit stopped at epoch 0 (global_step=0): training is turned off (limit_train_batches=0).")
    assert t.run_report.last["reason"] == "training_off"
