"""What ``RichProgressBar`` draws with: rich's ``Progress`` (one live display holding every bar of a run), its
columns, and ``RichTask``, one bar of that display behind the tqdm methods that ``ProgressBar``'s machinery calls.

This module imports rich, so it is imported only when the first rich bar is made (``rich_progress.py``). It decides
nothing about when a bar is made, counted or redrawn: ``progress.py`` does, through the ``RichTask`` methods.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.progress import BarColumn, Progress, ProgressColumn, Task, TaskID, TextColumn
from rich.text import Text

if TYPE_CHECKING:
    from stoker.callbacks.rich_theme import RichProgressBarTheme

__all__ = ["BatchesColumn", "MetricsColumn", "RichTask", "SpeedColumn", "TimeColumn", "default_columns",
           "start_progress"]


class BatchesColumn(ProgressColumn):
    """``done/total`` batches (``--`` for a loader without a length)."""

    def __init__(self, style: Any) -> None:
        super().__init__()
        self.style = style

    def render(self, task: Task) -> Text:
        total = "--" if task.total is None else int(task.total)
        return Text(f"{int(task.completed)}/{total}", style=self.style)


class TimeColumn(ProgressColumn):
    """``elapsed • left`` as h:mm:ss (``-:--:--`` while unknown), redrawn at most twice a second so it does not
    flicker."""

    max_refresh = 0.5

    def __init__(self, style: Any) -> None:
        super().__init__()
        self.style = style

    def render(self, task: Task) -> Text:
        elapsed = task.finished_time if task.finished else task.elapsed
        left = task.time_remaining
        shown = ["-:--:--" if t is None else str(timedelta(seconds=int(t))) for t in (elapsed, left)]
        return Text(" • ".join(shown), style=self.style)


class SpeedColumn(ProgressColumn):
    """Batches per second over rich's recent window."""

    def __init__(self, style: Any) -> None:
        super().__init__()
        self.style = style

    def render(self, task: Task) -> Text:
        return Text(f"{task.speed or 0.0:.2f}it/s", style=self.style)


class MetricsColumn(ProgressColumn):
    """The values a bar shows beside its count (``RichTask.set_postfix`` keeps them as text in the task's fields;
    only the training bar gets any)."""

    def __init__(self, style: Any) -> None:
        super().__init__()
        self.style = style

    def render(self, task: Task) -> Text:
        return Text(task.fields.get("metrics", ""), justify="left", style=self.style)


def default_columns(theme: RichProgressBarTheme) -> list[ProgressColumn]:
    """Title, bar (pulsing without a total), batches, time and speed, styled by ``theme``."""
    return [TextColumn("[progress.description]{task.description}"),
            BarColumn(complete_style=theme.progress_bar, finished_style=theme.progress_bar_finished,
                      pulse_style=theme.progress_bar_pulse),
            BatchesColumn(style=theme.batch_progress), TimeColumn(style=theme.time),
            SpeedColumn(style=theme.processing_speed)]


def start_progress(columns: list[ProgressColumn], theme: RichProgressBarTheme, console: Console) -> Progress:
    """A started live display with ``columns`` and the metrics column last. It draws only when told to
    (``RichTask.refresh``: the callback decides when), so no thread of rich's redraws it, and draws nothing off a
    terminal (the callback prints plain lines there). While it is live, rich sends ``print`` above it."""
    progress = Progress(*columns, MetricsColumn(theme.metrics), console=console, auto_refresh=False,
                        disable=not console.is_terminal)
    progress.start()
    return progress


class RichTask:
    """One bar: a task of a rich ``Progress``, or, without one (bars disabled), only its count.

    It offers what ``ProgressBar`` calls on a tqdm object (``reset``, ``total``, ``update``, ``set_description``,
    ``set_postfix``, ``refresh``, ``close``, ``write``, ``n``, ``disable``, ``leave``) and what a reader of
    Lightning's bars looks at (``completed``, ``visible``, ``task_id``, ``task``).

    Args:
        progress: The live display the task is added to, or None.
        description: The bar's title.
        leave: Keep the bar on screen when closed (otherwise it is hidden).
        theme: Its title's style, the metrics' format and delimiter.
    """

    def __init__(self, progress: Progress | None, description: str, leave: bool,
                 theme: RichProgressBarTheme) -> None:
        self.progress, self.leave, self.theme = progress, leave, theme
        self.n = self.last_print_n = self.initial = 0
        self._total: int | None = None
        self._counted = False  # the task holds a count since it was made or reset
        self.disable = progress is None
        self.task_id: TaskID | None = None
        if progress is not None:
            # Hidden until it is given its total (rich draws a new task at once: it would show "0/--").
            self.task_id = progress.add_task(self._styled(description), total=None, visible=False, metrics="")

    @property
    def task(self) -> Task | None:
        """rich's task (its ``completed``, ``total``, ``visible``, ``description``), None without a display."""
        return None if self.progress is None or self.task_id is None else self.progress.tasks[self.task_id]

    @property
    def completed(self) -> int:
        return self.n

    @property
    def visible(self) -> bool:
        task = self.task
        return task is not None and task.visible

    @property
    def total(self) -> int | None:
        return self._total

    @total.setter
    def total(self, value: int | None) -> None:
        self._total = value
        self._set(total=value, visible=True)

    def _styled(self, text: str) -> str:
        return f"[{self.theme.description}]{text}" if self.theme.description else text

    def _update(self, **changes: Any) -> None:
        """A change of the count or of the visibility, through rich's ``Progress.update`` (as Lightning's bar)."""
        if self.progress is not None and self.task_id is not None:
            self.progress.update(self.task_id, **changes)

    def _set(self, **values: Any) -> None:
        """Sets the task's title or total (and ``set_postfix`` its shown values) in place: they are read only when
        the display draws, so ``Progress.update`` is kept for what Lightning's bar updates with it (counts, hiding)."""
        task = self.task
        if task is not None:
            for name, value in values.items():
                setattr(task, name, value)

    def reset(self) -> None:
        """Back to 0 for a new count (a fresh task is left as it is: it starts at 0 already)."""
        self.n = self.last_print_n = 0
        if self._counted and self.progress is not None and self.task_id is not None:
            self.progress.reset(self.task_id, total=self._total, visible=True)
        self._counted = False

    def update(self, count: int = 1) -> None:
        self.n += count
        self._counted = True
        self._update(completed=self.n)

    def set_description(self, text: str, refresh: bool = True) -> None:
        self._set(description=self._styled(text))

    def set_postfix(self, values: Mapping[str, Any], refresh: bool = True) -> None:
        task = self.task
        if task is not None:
            task.fields["metrics"] = self.theme.metrics_text_delimiter.join(
                f"{name}: {self._formatted(value)}" for name, value in values.items())
        if refresh:
            self.refresh()

    def _formatted(self, value: Any) -> str:
        if isinstance(value, (str, bool, int)):  # a version, a step, a flag: not a measurement to round
            return str(value)
        try:
            return f"{value:{self.theme.metrics_format}}"
        except (TypeError, ValueError):
            return str(value)

    def refresh(self) -> None:
        """Draws the display now (all its bars)."""
        self.last_print_n = self.n
        if self.progress is not None and self.progress.live.is_started:
            self.progress.refresh()

    def close(self) -> None:
        """Done: hidden unless ``leave``; counts no more."""
        if not self.leave:
            self._update(visible=False)
        self.refresh()
        self.disable = True

    def write(self, text: str, file: Any = None, end: str = "\n", **_: Any) -> None:
        """A line above the display (``ProgressBar.print``)."""
        if file is not None or self.progress is None:
            print(text, end=end, file=file)
            return
        self.progress.console.print(text, end=end, markup=False, highlight=False)
