"""RichProgressBar: rich's look on ProgressBar's timing; on a (fake) terminal console, off a terminal, disabled."""

from __future__ import annotations

import io
import pickle
import re
import sys

import pytest
import rich
from rich.console import Console

from stoker.callbacks import ProgressBar, RichProgressBar, RichProgressBarTheme
from tests.callbacks.modules import loaders, trainer
from tests.helpers.dist_spawn import base_env
from tests.helpers.forkserver import run_python
from tests.helpers.models import Regressor


@pytest.fixture
def screen(monkeypatch):
    """A terminal console writing into a string (what a user would see, with no colors)."""
    console = Console(file=io.StringIO(), force_terminal=True, width=160, color_system=None)
    monkeypatch.setattr(rich, "get_console", lambda: console)
    return console.file


def _tasks(bar):
    return [(t.description.strip(), t.completed, t.total, t.visible) for t in bar.progress.tasks]


def test_importing_the_bar_and_its_lightning_path_leaves_rich_unloaded():
    code = ("import sys, stoker, stoker.callbacks.progress.rich_progress as lp, stoker.callbacks.rich_model_summary "
            "as ls\nfrom stoker.callbacks import RichProgressBar, RichModelSummary, RichProgressBarTheme\n"
            "assert lp.RichProgressBar is RichProgressBar and lp.RichProgressBarTheme is RichProgressBarTheme\n"
            "assert ls.RichModelSummary is RichModelSummary\nRichProgressBar()\nassert 'rich' not in sys.modules\n")
    done = run_python(["-c", code], env=base_env(), timeout=120)  # a process without stoker or rich loaded
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("kind", ["RichProgressBar", "RichModelSummary"])
def test_without_rich_the_error_says_how_to_install_it(monkeypatch, kind):
    from stoker import callbacks

    monkeypatch.setitem(sys.modules, "rich", None)  # as if not installed
    with pytest.raises(ImportError, match="pip install rich"):
        getattr(callbacks, kind)()


@pytest.mark.parametrize(("kwargs", "error"), [({"refresh_rate": -1}, ValueError), ({"refresh_rate": "10"}, ValueError),
                                               ({"seconds": -0.5}, ValueError), ({"theme": "dark"}, TypeError)])
def test_bad_arguments_are_refused(kwargs, error):
    with pytest.raises(error, match=next(iter(kwargs))):
        RichProgressBar(**kwargs)


def test_enabled_before_a_run_unless_refresh_rate_is_zero_or_disabled():
    assert RichProgressBar(refresh_rate=1).is_enabled
    assert RichProgressBar(refresh_rate=0).is_disabled
    bar = RichProgressBar()
    bar.disable()
    assert bar.is_disabled
    bar.enable()
    assert bar.is_enabled


def test_a_fit_on_a_terminal_draws_the_epoch_bar_with_its_values(tmp_path, screen):
    bar = RichProgressBar()
    t = trainer(tmp_path, max_epochs=2, callbacks=[bar], num_sanity_val_steps=0)
    assert t.progress_bar_callback is bar
    t.fit(Regressor(prog_bar=True), *loaders())
    text = screen.getvalue()
    assert "Epoch 1/1" in text and "4/4" in text and "it/s" in text
    last = [line for line in text.splitlines() if "Epoch 1/1" in line][-1]
    assert "train/loss: " in last and "val/loss: " in last  # name: value, three decimals
    value = last.split("val/loss: ")[1].split()[0]
    assert len(value.split(".")[1]) == 3
    # one training bar for the fit (leave=False), kept; the validation bars are hidden when done
    tasks = _tasks(bar)
    assert tasks[0] == ("Epoch 1/1", 4, 4, True)
    assert [task[1:] for task in tasks[1:]] == [(2, 2, False)] * 2
    assert not bar.progress.live.is_started  # the display stops with the run


def test_off_a_terminal_it_prints_plain_lines_and_still_counts(tmp_path, capsys):
    bar = RichProgressBar()
    t = trainer(tmp_path, max_epochs=1, callbacks=[bar], enable_model_summary=False, num_sanity_val_steps=0)
    t.fit(Regressor(prog_bar=True), *loaders())
    captured = capsys.readouterr()
    assert "\x1b" not in captured.out + captured.err and "━" not in captured.out + captured.err
    assert [line.split(":")[0] for line in captured.err.splitlines() if line] == ["Validation", "Epoch 0"]
    assert bar.train_progress_bar.completed == 4 and bar.train_progress_bar.total == 4
    assert bar.train_progress_bar_id == 0 and bar.val_progress_bar_id == 1


def test_the_shown_values_are_read_from_the_device_only_when_refreshed(tmp_path, screen):
    class Counting(RichProgressBar):
        reads = 0

        def get_metrics(self, trainer, module):
            Counting.reads += 1
            return super().get_metrics(trainer, module)

    bar = Counting(seconds=3600.0)  # far apart: only the epoch's and the validation's ends read them
    trainer(tmp_path, max_epochs=1, callbacks=[bar]).fit(Regressor(prog_bar=True), *loaders(n=160))
    assert bar.train_progress_bar.completed == 20
    assert Counting.reads <= 3


def test_leave_keeps_each_epoch_bar_on_screen(tmp_path, screen):
    bar = RichProgressBar(leave=True)
    trainer(tmp_path, max_epochs=3, callbacks=[bar]).fit(Regressor(), loaders()[0])
    finals = set(re.findall(r"Epoch (\d/2) [^\r\n]*? 4/4 ", screen.getvalue()))
    assert finals == {"0/2", "1/2", "2/2"}
    assert [task[0] for task in _tasks(bar)] == ["Epoch 2/2"]  # the last epoch's display


def test_a_disabled_bar_makes_no_display_and_prints_nothing(tmp_path, capsys):
    bar = RichProgressBar(refresh_rate=0)
    t = trainer(tmp_path, max_epochs=1, callbacks=[bar])
    t.fit(Regressor(), *loaders())
    t.validate(Regressor(), dataloaders=loaders()[1])
    assert bar.progress is None and bar.train_progress_bar_id is None
    assert capsys.readouterr().err == ""


def test_prints_during_the_fit_land_above_the_bar(tmp_path, screen):
    class Talking(Regressor):
        def training_step(self, batch, batch_idx):
            if batch_idx == 1:
                print("halfway through the epoch")
            return super().training_step(batch, batch_idx)

    bar = RichProgressBar()
    trainer(tmp_path, max_epochs=1, callbacks=[bar]).fit(Talking(), loaders()[0])
    bar.print("after the fit")
    text = screen.getvalue()
    assert "halfway through the epoch" in text
    assert type(sys.stdout).__name__ != "FileProxy"  # rich gave stdout back


def test_the_theme_styles_the_columns_and_formats_the_values(tmp_path, screen):
    theme = RichProgressBarTheme(batch_progress="bold", time="red", processing_speed="blue", metrics_format=".2e",
                                 metrics_text_delimiter=" | ")
    bar = RichProgressBar(theme=theme)
    styles = [getattr(column, "style", None) for column in bar.configure_columns(None)[2:]]
    assert styles == ["bold", "red", "blue"]
    trainer(tmp_path, max_epochs=1, callbacks=[bar]).fit(Regressor(prog_bar=True), *loaders())
    last = [line for line in screen.getvalue().splitlines() if "Epoch 0/0" in line][-1]
    assert " | val/loss: " in last
    assert re.fullmatch(r"-?\d\.\d\de[+-]\d+", last.split("val/loss: ")[1].split()[0])


def test_columns_can_be_replaced_and_the_values_stay_last(tmp_path, screen):
    from rich.progress import TextColumn

    class Plain(RichProgressBar):
        def configure_columns(self, trainer):
            return [TextColumn("[{task.completed}]")]

    bar = Plain()
    trainer(tmp_path, max_epochs=1, callbacks=[bar]).fit(Regressor(prog_bar=True), loaders()[0])
    assert len(bar.progress.columns) == 2
    assert "[4] train/loss: " in screen.getvalue()


def test_console_kwargs_configure_rich_once(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(rich, "reconfigure", lambda **kwargs: seen.append(kwargs))
    monkeypatch.setattr(rich, "get_console", lambda: Console(file=io.StringIO()))
    bar = RichProgressBar(console_kwargs={"width": 100})
    trainer(tmp_path, max_epochs=2, callbacks=[bar]).fit(Regressor(), loaders()[0])
    assert seen == [{"width": 100}]


def test_the_bar_pickles_before_during_and_after_runs(tmp_path, screen):
    bar = RichProgressBar()
    pickle.dumps(bar)
    t = trainer(tmp_path, max_epochs=1, callbacks=[bar])
    t.fit(Regressor(), *loaders())
    copy = pickle.loads(pickle.dumps(bar))
    assert copy.progress is None and isinstance(copy, ProgressBar)
    t.test(Regressor(), dataloaders=loaders()[1])
    pickle.dumps(bar)


def test_evaluation_runs_keep_their_bar(tmp_path, screen):
    bar = RichProgressBar()
    t = trainer(tmp_path, callbacks=[bar])
    t.validate(Regressor(), dataloaders=loaders()[1])
    assert _tasks(bar) == [("Validation", 2, 2, True)]
    t.test(Regressor(), dataloaders=loaders()[1])
    assert _tasks(bar) == [("Testing", 2, 2, True)] and bar.test_progress_bar_id == 0


def test_an_error_mid_fit_stops_the_display_and_gives_stdout_back(tmp_path, screen):
    class Failing(Regressor):
        def training_step(self, batch, batch_idx):
            if batch_idx == 2:
                raise RuntimeError("broken batch")
            return super().training_step(batch, batch_idx)

    stdout = sys.stdout
    bar = RichProgressBar()
    with pytest.raises(RuntimeError, match="broken batch"):
        trainer(tmp_path, max_epochs=1, callbacks=[bar]).fit(Failing(), loaders()[0])
    assert not bar.progress.live.is_started and sys.stdout is stdout
    assert bar.train_progress_bar.completed == 2


def _count_updates(bar, monkeypatch):
    """Counts the calls of ``Progress.update`` on any rich display the bar makes."""
    from rich.progress import Progress

    calls = []
    original = Progress.update
    monkeypatch.setattr(Progress, "update", lambda self, *a, **kw: (calls.append(kw), original(self, *a, **kw))[1])
    return calls


@pytest.mark.parametrize("on_terminal", [True, False])
def test_each_batch_and_each_hidden_validation_bar_is_one_rich_update(tmp_path, monkeypatch, capsys, on_terminal):
    if on_terminal:
        screen = Console(file=io.StringIO(), force_terminal=True, width=160, color_system=None)
        monkeypatch.setattr(rich, "get_console", lambda: screen)
    bar = RichProgressBar()
    calls = _count_updates(bar, monkeypatch)
    bar.on_train_start(None, None)  # a display started before the fit is the one the fit uses
    display = bar.progress
    trainer(tmp_path, max_epochs=2, callbacks=[bar], num_sanity_val_steps=0).fit(Regressor(prog_bar=True), *loaders())
    # 4 training and 2 validation batches per epoch, and the finished validation bar hidden: titles, totals and
    # shown values are set without an update
    assert len(calls) == 2 * (4 + 2 + 1)
    assert [kw for kw in calls if "completed" not in kw] == [{"visible": False}] * 2
    assert bar.progress is display
    assert _tasks(bar) == [("Epoch 1/1", 4, 4, True), ("Validation", 2, 2, False), ("Validation", 2, 2, False)]


def test_the_task_counts_every_batch_while_drawing_keeps_its_pace(tmp_path, screen):
    from stoker.callbacks import Callback

    seen = []

    class Watch(Callback):
        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            seen.append(bar.progress.tasks[0].completed)

    bar = RichProgressBar(refresh_rate=0.001)  # a redraw at most every 1000 s, and at each bar's last batch
    trainer(tmp_path, max_epochs=1, callbacks=[bar, Watch()]).fit(Regressor(), loaders(n=64)[0])
    assert seen == list(range(1, 9))
    drawn = set(re.findall(r" (\d)/8 ", screen.getvalue()))
    assert "8" in drawn and drawn <= {"0", "1", "8"}  # drawn at the start, the first batch and the end only


def test_sanity_check_epoch_and_validations_are_tasks_in_that_order(tmp_path, screen):
    bar = RichProgressBar()
    t = trainer(tmp_path, max_epochs=1, num_sanity_val_steps=1, val_check_interval=2, callbacks=[bar])
    t.fit(Regressor(), *loaders())
    assert _tasks(bar) == [("Sanity Checking", 1, 1, False), ("Epoch 0/0", 4, 4, True),
                           ("Validation", 2, 2, False), ("Validation", 2, 2, False)]
    t.validate(Regressor(), dataloaders=loaders()[1])  # a run of its own: a new display, its bar the first task
    assert _tasks(bar) == [("Validation", 2, 2, True)] and bar.val_progress_bar_id == 0
