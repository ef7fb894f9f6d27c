"""The progress bar in real fits: captured output on a non-terminal and on a (fake) terminal."""

import io

import pytest
import torch

from stoker import ProgressBar
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_default_bar_off_a_terminal_prints_clean_lines(tmp_path, capsys):
    t = trainer(tmp_path, max_epochs=2, enable_progress_bar=True, num_sanity_val_steps=0)
    assert any(isinstance(c, ProgressBar) for c in t.callbacks)
    t.fit(Regressor(prog_bar=True), *loaders())
    t.validate(dataloaders=loaders()[1])
    err = capsys.readouterr().err
    assert "\r" not in err and "\x1b" not in err  # no carriage-return redraws or cursor moves in a log file
    lines = [line for line in err.splitlines() if line]
    assert [line.split(":")[0] for line in lines] == ["Validation", "Epoch 0", "Validation", "Epoch 1", "Validation"]
    epoch = lines[1]
    assert epoch.startswith("Epoch 0: 4/4 [") and "it/s]" in epoch
    assert "loss=" in epoch and "train/loss=" in epoch and "val/loss=" in epoch
    assert lines[0].startswith("Validation: 2/2 [")


def test_bar_on_a_terminal_shows_epoch_and_validation_bars(tmp_path):
    out = _Terminal()
    t = trainer(tmp_path, max_epochs=1, callbacks=[ProgressBar(file=out, refresh_rate=0.01)])
    t.fit(Regressor(prog_bar=True), *loaders())
    text = out.getvalue()
    final = [part for part in text.split("\r") if part.startswith("Epoch 0")][-1]
    assert "100%" in final and "4/4" in final and "it/s" in final
    assert "loss=" in final and "val/loss=" in final
    assert "Validation" in text


def test_disabled_bar_prints_nothing(tmp_path, capsys):
    trainer(tmp_path, max_epochs=1, enable_progress_bar=False).fit(Regressor(prog_bar=True), *loaders())
    assert capsys.readouterr().err == ""


def _postfix_keys(line):
    """The names shown after the bar's ``[time, rate]`` part: ``['loss', 'val/loss']``."""
    tail = line.split("]", 1)[1].strip().rstrip("]")
    return [item.split("=")[0].strip() for item in tail.split(", ") if "=" in item]


def test_bar_total_follows_max_steps_that_ends_the_run_mid_epoch(tmp_path, capsys):
    t = trainer(tmp_path, max_steps=6, enable_progress_bar=True)  # 4 batches per epoch: epoch 1 runs 2
    t.fit(Regressor(prog_bar=True), loaders()[0])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("Epoch")]
    assert [line.split(" [")[0] for line in lines] == ["Epoch 0: 4/4", "Epoch 1: 2/2"]

    out = _Terminal()
    t = trainer(tmp_path / "tty", max_steps=3, accumulate=2, callbacks=[ProgressBar(file=out, refresh_rate=0.01)])
    t.fit(Regressor(prog_bar=True), loaders(n=64)[0])  # 8 batches per epoch, 4 steps: the run ends after 6 batches
    final = [part for part in out.getvalue().split("\r") if part.startswith("Epoch 0")][-1]
    assert "100%" in final and "6/6" in final and "<00:00" in final, final


def test_a_run_stopped_mid_epoch_ends_with_a_full_bar(tmp_path):
    class StopAtBatch1(Regressor):
        def on_train_batch_end(self, outputs, batch, batch_idx):
            if batch_idx == 1:
                self.trainer.should_stop = True

    out = _Terminal()
    t = trainer(tmp_path, max_epochs=3, callbacks=[ProgressBar(file=out, refresh_rate=0.01)])
    t.fit(StopAtBatch1(prog_bar=True), loaders()[0])
    final = [part for part in out.getvalue().split("\r") if part.startswith("Epoch 0")][-1]
    assert "100%" in final and "2/2" in final, final


def test_a_loss_logged_to_the_bar_is_shown_once_under_its_name(tmp_path, capsys):
    trainer(tmp_path, max_epochs=1, enable_progress_bar=True).fit(Regressor(prog_bar=True), loaders()[0])
    (epoch,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("Epoch 0")]
    assert _postfix_keys(epoch) == ["train/loss"]  # not also "loss" with the same number

    class Quiet(Regressor):  # logs nothing to the bar: the bar shows the returned loss itself
        def training_step(self, batch, batch_idx):
            x, y = batch
            return torch.nn.functional.mse_loss(self.net(x), y)

    trainer(tmp_path, max_epochs=1, enable_progress_bar=True).fit(Quiet(), loaders()[0])
    (epoch,) = [line for line in capsys.readouterr().err.splitlines() if line.startswith("Epoch 0")]
    assert _postfix_keys(epoch) == ["loss"]


def test_resume_prints_one_line_naming_the_checkpoint_and_the_step(tmp_path, capsys):
    trainer(tmp_path, max_epochs=1).fit(Regressor(prog_bar=True), loaders()[0])
    capsys.readouterr()
    trainer(tmp_path, max_epochs=2).fit(Regressor(prog_bar=True), loaders()[0], ckpt_path="last")
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("stoker:")]
    last = tmp_path / "checkpoints" / "epoch=0-step=4.ckpt"  # the default ModelCheckpoint writes no `last`
    assert lines == [f"stoker: resumed from checkpoint {last}; continuing from global_step 4 (the end of epoch 0)."]

    trainer(tmp_path / "fresh", max_epochs=1).fit(Regressor(prog_bar=True), loaders()[0], ckpt_path="last")
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("stoker:")]
    assert len(lines) == 1 and "found no complete checkpoint" in lines[0] and "starting from the beginning" in lines[0]


def test_resume_mid_epoch_names_the_next_batch(tmp_path, capsys):
    from stoker import ModelCheckpoint

    ckpt = ModelCheckpoint(save_last=True, every_n_train_steps=3)
    trainer(tmp_path, max_steps=3, callbacks=[ckpt]).fit(Regressor(prog_bar=True), loaders()[0])
    capsys.readouterr()
    trainer(tmp_path, max_epochs=1, callbacks=[ModelCheckpoint(save_last=True, every_n_train_steps=3)],
            enable_progress_bar=True).fit(
        Regressor(prog_bar=True), loaders()[0], ckpt_path="last")
    err = capsys.readouterr().err.splitlines()
    lines = [line for line in err if line.startswith("stoker:")]
    assert len(lines) == 1 and lines[0].endswith("continuing from global_step 3 (epoch 0, batch_idx 3)."), lines
    (bar,) = [line for line in err if line.startswith("Epoch 0")]
    assert bar.startswith("Epoch 0: 4/4 [")  # the resumed epoch's bar counts the batches done before the stop


def test_a_validation_end_reads_the_metrics_once_for_its_line_and_the_epoch_bar(tmp_path, capsys):
    class Counting(ProgressBar):
        reads = 0

        def get_metrics(self, trainer, module):
            Counting.reads += 1
            return super().get_metrics(trainer, module)

    bar = Counting(refresh_rate=3600.0)  # no read on time: only the validation's end and the epoch's end read
    trainer(tmp_path, max_epochs=2, callbacks=[bar], num_sanity_val_steps=0).fit(Regressor(prog_bar=True), *loaders())
    assert Counting.reads == 2 * 2
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("Validation")]
    assert len(lines) == 2 and all("val/loss=" in line for line in lines)


def test_a_trainer_takes_one_progress_bar(tmp_path):
    from stoker import Trainer
    from stoker.callbacks import TQDMProgressBar

    with pytest.raises(ValueError, match=r"2 progress bars \['ProgressBar', 'TQDMProgressBar'\]"):
        Trainer(default_root_dir=str(tmp_path), callbacks=[ProgressBar(), TQDMProgressBar()])
    # a bar passed in is drawn; with enable_progress_bar=False it is a contradiction, refused as Lightning refuses it
    only = TQDMProgressBar()
    assert trainer(tmp_path, callbacks=[only]).progress_bar_callback is only
    with pytest.raises(ValueError, match=r"enable_progress_bar=False.*TQDMProgressBar.*remove it"):
        trainer(tmp_path, callbacks=[only], enable_progress_bar=False)


def test_a_bar_reused_for_the_next_epoch_is_redrawn_under_that_epochs_title(tmp_path):
    out = _Terminal()
    t = trainer(tmp_path, max_epochs=2, callbacks=[ProgressBar(file=out, refresh_rate=0.01, leave=False)])
    t.fit(Regressor(), loaders()[0])
    frames = out.getvalue().split("\r")
    assert any(frame.startswith("Epoch 1:   0%") for frame in frames)  # the emptied bar, drawn by its reset
    assert not any(frame.startswith("Epoch 0:   0%") for frame in frames)
