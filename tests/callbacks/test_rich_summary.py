"""RichModelSummary: ModelSummary's rows and totals as a rich table; the default summary beside a RichProgressBar."""

from __future__ import annotations

import io
import re

import pytest
import rich
from rich.console import Console

from stoker.callbacks import ModelSummary, RichModelSummary, RichProgressBar
from stoker.callbacks.summary import summarize
from tests.callbacks.modules import loaders, trainer
from tests.helpers.models import Regressor


@pytest.fixture
def screen(monkeypatch):
    console = Console(file=io.StringIO(), width=200, color_system=None)
    monkeypatch.setattr(rich, "get_console", lambda: console)
    return console.file


def test_the_rich_table_holds_the_same_rows_and_totals(tmp_path, screen):
    summary = RichModelSummary(max_depth=2)
    trainer(tmp_path, max_epochs=1, callbacks=[summary]).fit(Regressor(), loaders()[0])
    text = screen.getvalue()
    for title, cells in summary.table.columns():
        assert title in text and all(cell in text for cell in cells)
    for value, label in summary.table.totals():
        assert re.search(rf"{re.escape(label)}: +{re.escape(value)}", text)
    assert "Device: cpu | processes: 1" in text


def test_the_columns_and_totals_are_what_the_text_table_prints():
    table = summarize(Regressor())
    text = str(table)
    assert [title for title, _ in table.columns()] == [" ", "Name", "Type", "Params", "Trainable", "Size", "Mode"]
    assert all(f"{value:<10}{label}" in text for value, label in table.totals())


def test_depth_zero_draws_nothing(tmp_path, screen):
    trainer(tmp_path, max_epochs=1, callbacks=[RichModelSummary(max_depth=0)]).fit(Regressor(), loaders()[0])
    assert screen.getvalue() == ""


def test_a_rich_bar_brings_the_rich_table_unless_a_summary_is_given(tmp_path):
    chosen = trainer(tmp_path, callbacks=[RichProgressBar()], enable_progress_bar=True)
    assert sum(isinstance(c, ModelSummary) for c in chosen.callbacks) == 1
    assert any(type(c) is RichModelSummary for c in chosen.callbacks)
    plain = trainer(tmp_path, callbacks=[RichProgressBar(), ModelSummary(max_depth=2)], enable_progress_bar=True)
    assert [type(c) for c in plain.callbacks if isinstance(c, ModelSummary)] == [ModelSummary]
    assert not any(isinstance(c, RichModelSummary) for c in trainer(tmp_path).callbacks)
    off = trainer(tmp_path, callbacks=[RichProgressBar()], enable_progress_bar=True, enable_model_summary=False)
    assert not any(isinstance(c, ModelSummary) for c in off.callbacks)


def test_layer_names_are_shown_as_written_not_as_markup(tmp_path, screen):
    import torch

    class Bracketed(Regressor):
        def __init__(self):
            super().__init__()
            self.add_module("head[bold]", torch.nn.Linear(1, 1))

    trainer(tmp_path, max_epochs=1, callbacks=[RichModelSummary()]).fit(Bracketed(), loaders()[0])
    assert "head[bold]" in screen.getvalue()
