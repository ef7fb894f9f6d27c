"""The progress bar in real fits: captured output on a non-terminal and on a (fake) terminal."""

import io

from stoker import ProgressBar
from tests.callbacks.modules import Regressor, loaders, trainer


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_default_bar_off_a_terminal_prints_clean_lines(tmp_path, capsys):
    t = trainer(tmp_path, max_epochs=2, enable_progress_bar=True)
    assert any(isinstance(c, ProgressBar) for c in t.callbacks)
    t.fit(Regressor(), *loaders())
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
    t.fit(Regressor(), *loaders())
    text = out.getvalue()
    final = [part for part in text.split("\r") if part.startswith("Epoch 0")][-1]
    assert "100%" in final and "4/4" in final and "it/s" in final
    assert "loss=" in final and "val/loss=" in final
    assert "Validation" in text


def test_disabled_bar_prints_nothing(tmp_path, capsys):
    trainer(tmp_path, max_epochs=1, enable_progress_bar=False).fit(Regressor(), *loaders())
    assert capsys.readouterr().err == ""
