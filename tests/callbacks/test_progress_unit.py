"""ProgressBar output and refresh policy against a stand-in trainer (a real fit: test_progress_fit.py)."""

import io

import pytest
import torch

from stoker.callbacks import ProgressBar
from tests.callbacks.fakes import FakeTrainer


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def _epoch(trainer, bar, batches=5, val_batches=2):
    bar.on_train_epoch_start(trainer, trainer.module)
    for i in range(batches):
        bar.on_train_batch_end(trainer, trainer.module, {"loss": torch.tensor(0.25 + i)}, None, i)
    bar.on_validation_start(trainer, trainer.module)
    for i in range(val_batches):
        bar.on_validation_batch_end(trainer, trainer.module, None, None, i)
    trainer.progress_bar_metrics = {"val/acc": torch.tensor(0.875)}
    bar.on_validation_end(trainer, trainer.module)
    bar.on_train_epoch_end(trainer, trainer.module)


def _run(tmp_path, file, epochs=2, **kw):
    bar = ProgressBar(file=file, **kw)
    trainer = FakeTrainer(str(tmp_path), callbacks=[bar], num_training_batches=5, num_val_batches=[2])
    bar.setup(trainer, trainer.module, "fit")
    for epoch in range(epochs):
        trainer.current_epoch = epoch
        _epoch(trainer, bar)
    bar.on_train_end(trainer, trainer.module)
    return file.getvalue()


def test_non_terminal_output_is_plain_lines_without_carriage_returns(tmp_path):
    out = _run(tmp_path, io.StringIO())
    assert "\r" not in out and "\x1b" not in out
    lines = out.splitlines()
    assert len(lines) == 4, out  # per epoch: one validation line and one epoch line
    assert lines[0].startswith("Validation: 2/2 [")
    assert lines[1].startswith("Epoch 0: 5/5 [") and "it/s]" in lines[1]
    assert "loss=4.25" in lines[1] and "val/acc=0.875" in lines[1]
    assert lines[3].startswith("Epoch 1: 5/5")


def test_terminal_output_is_a_tqdm_bar_with_loss_and_metrics(tmp_path):
    out = _run(tmp_path, _Terminal(), epochs=1)
    final = [part for part in out.split("\r") if part.startswith("Epoch 0")][-1]
    assert "Epoch 0: 100%" in final and "5/5" in final
    assert "loss=4.25" in final and "val/acc=0.875" in final


def test_bar_redraws_on_time_not_per_batch(tmp_path, monkeypatch):
    import tqdm

    draws = []
    real_update = tqdm.tqdm.update
    monkeypatch.setattr(tqdm.tqdm, "update", lambda self, n=1: draws.append(n) or real_update(self, n))
    bar = ProgressBar(file=_Terminal(), refresh_rate=3600)
    trainer = FakeTrainer(str(tmp_path), callbacks=[bar], num_training_batches=1000)
    bar.setup(trainer, trainer.module, "fit")
    bar.on_train_epoch_start(trainer, trainer.module)
    for i in range(1000):
        bar.on_train_batch_end(trainer, trainer.module, torch.tensor(1.0), None, i)
    assert draws == []  # an hour has not passed: no redraw, no .item()
    bar.on_train_epoch_end(trainer, trainer.module)
    assert draws == [1000]


def test_only_global_zero_draws_and_zero_rate_disables(tmp_path):
    file = io.StringIO()
    bar = ProgressBar(file=file)
    trainer = FakeTrainer(str(tmp_path), callbacks=[bar], is_global_zero=False)
    bar.setup(trainer, trainer.module, "fit")
    _epoch(trainer, bar)
    assert file.getvalue() == "" and not bar.is_enabled
    assert _run(tmp_path, io.StringIO(), refresh_rate=0) == ""


def test_bars_are_closed_on_exception(tmp_path):
    file = _Terminal()
    bar = ProgressBar(file=file)
    trainer = FakeTrainer(str(tmp_path), callbacks=[bar])
    bar.setup(trainer, trainer.module, "fit")
    bar.on_train_epoch_start(trainer, trainer.module)
    bar.on_train_batch_end(trainer, trainer.module, torch.tensor(1.0), None, 0)
    bar.on_exception(trainer, trainer.module, RuntimeError("boom"))
    assert bar._train is None and file.getvalue().endswith("\n")


def test_refresh_rate_must_be_seconds():
    with pytest.raises(ValueError, match="refresh_rate=-1"):
        ProgressBar(refresh_rate=-1)


def test_a_pickled_bar_draws_to_its_own_processes_stderr(tmp_path, capsys):
    # A Trainer sent to another process (pickled) takes its callbacks along: the bar keeps its settings, leaves
    # the stream and any live bar behind, and draws to stderr where it lands; a stream it was given is kept.
    import pickle
    import sys

    bar = ProgressBar(refresh_rate=0.5, leave=True)
    trainer = FakeTrainer(str(tmp_path))
    bar.setup(trainer, None, "fit")
    copy = pickle.loads(pickle.dumps(bar))
    assert (copy.refresh_rate, copy.leave) == (0.5, True) and copy._file is sys.stderr
    own = pickle.loads(pickle.dumps(ProgressBar(file=sys.stdout)))
    assert own._file is sys.stdout  # a standard stream is the receiving process's own, by name
    copy.setup(trainer, None, "fit")
    assert copy.trainer is trainer
