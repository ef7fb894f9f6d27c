"""Printing while a bar is drawn goes above the bar (plain ``print``, ``module.print``, ``trainer.print``), stdout
is given back when the bars close; off a terminal, progress lines carry the rate and the time left."""

from __future__ import annotations

import io
import re
import sys

from stoker import ProgressBar
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor


class _Terminal(io.StringIO):
    def isatty(self):
        return True


class _Chatty(Regressor):
    def training_step(self, batch, batch_idx):
        if batch_idx == 2:
            print("plain print at batch 2")
            self.print("module.print at batch 2")
            self.trainer.print("trainer.print", "at batch 2")
        return super().training_step(batch, batch_idx)


def test_prints_while_the_bar_is_drawn_go_above_it(tmp_path, monkeypatch):
    screen = _Terminal()  # stdout and the bar share one terminal, as in a shell
    monkeypatch.setattr(sys, "stdout", screen)
    t = trainer(tmp_path, max_epochs=1, callbacks=[ProgressBar(file=screen, refresh_rate=0.0001)])
    t.fit(_Chatty(), *loaders())
    assert sys.stdout is screen  # given back when the bars closed
    text = screen.getvalue()
    for line in ("plain print at batch 2", "module.print at batch 2", "trainer.print at batch 2"):
        at = text.index(line + "\n")
        before = text[:at]
        # The bar was cleared first: the line starts at the beginning of the (blanked) bar line, never after "]".
        assert before.endswith("\r") or before.endswith("\n"), repr(before[-80:])
        assert text[at + len(line) + 1:].lstrip(" \r").startswith("Epoch 0")  # and the bar is redrawn below it


def test_stdout_is_not_touched_off_a_terminal(tmp_path, capsys):
    seen = []

    class Look(Regressor):
        def training_step(self, batch, batch_idx):
            seen.append(sys.stdout)
            return super().training_step(batch, batch_idx)

    before = sys.stdout
    trainer(tmp_path, max_epochs=1, enable_progress_bar=True).fit(Look(), *loaders())
    assert set(map(id, seen)) == {id(before)}


def test_off_terminal_lines_carry_rate_and_time_left(tmp_path, capsys):
    t = trainer(tmp_path, max_epochs=1, callbacks=[ProgressBar(refresh_rate=1e-6, line_interval=1e-9)])
    t.fit(Regressor(), loaders()[0])
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("Epoch 0")]
    assert len(lines) >= 2
    pattern = r"Epoch 0: (\d)/4 \[\d\d:\d\d<(\d\d:\d\d|\?), \d+\.\d\dit/s\]"
    first, last = re.match(pattern, lines[0]), re.match(pattern, lines[-1])
    assert first and last, lines
    assert int(first.group(1)) < 4 and first.group(2)  # mid-epoch: the time left at the rate so far
    assert last.group(1) == "4" and last.group(2) == "00:00"
